"""Every Lua script of the service runs on a real Redis Cluster, all of each call's keys in one slot.

On a Cluster a script may touch only keys of the slot its KEYS are in: the master refuses a call
whose KEYS span slots (``CROSSSLOT``) and a command of the script outside them ("Script attempted
to access a non local key", "... keys that do not hash to the same slot"). The service's paths run
here on a Cluster of three masters and four virtual shards, with real ``svcgw serve`` and ``svcgw
worker`` processes, the simulator, the CLI and the console, while ``MONITOR`` follows every master
(tests.scriptkeys): the upgrade's rename at start, the gateway's calls (``device/create`` under a
quota, a QR login, ``long/start``), posts to the receivers (a ``GapClosed`` too), deliveries, a
retry, a retry now, a dead letter replayed, the prober finding an instance offline and its
service event, a scrape of ``/metrics``, an account given a password and signed in with it (again
with its device cookie), the console signed in to and changing something. The scripts that run
only in a race or at a worker's shutdown
(``chain_advance``, ``queue_release``, ``probe_release``, and ``queue_unpark``, which runs when a
destination being probed answers again) are run by the service's own functions
on the Cluster client, once the worker has stopped, as is a claim of a further destination's delivery.

Then: the scripts that ran are exactly the service's (``svcgw.storage.scripts.names``), every
key each call named or touched is in its first KEY's slot and named in its KEYS, and no master
answered any error but the ``NOSCRIPT`` that makes a client load a script.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import httpx
import orjson
import pytest
from click.testing import CliRunner

from cli.main import cli
from svcgw.callbacks.addresses import check_for_service
from svcgw.config.settings import Settings
from svcgw.delivery import chainkeys, failingorigins
from svcgw.delivery.queue import DeliveryQueue, Finish, Finished
from svcgw.deliveryid import new_delivery_id
from svcgw.intake.receivers import RECEIVER_PREFIX
from svcgw.liveness import transitions
from svcgw.registry.store import Scope
from svcgw.shards.clients import aclose_all, role_clients
from svcgw.shards.placement import shard_of_token
from svcgw.storage import scripts
from svcgw.storage.keys import KeySpace
from svcgw.storage.rqformat import job_description, job_fields, rq_now
from svcgw.upstream import Upstream
from tests.cli.commands import ok
from tests.conftest import run
from tests.deploy.redis_fleet import RedisClusterFleet, cluster_fixture, sharded_store
from tests.deploy.test_cluster import _tokens
from tests.receiver.console.conftest import ConsoleClient
from tests.receiver.gateway.stack import sim as sim  # the module's simulator fixture
from tests.receiver.gateway.stack import start_stack
from tests.scriptkeys import ScriptKeyWatch
from tests.support import Process, Received, Sink, wait_for
from tests.support_twotags import TwoTags
from worker.prober import Prober

pytestmark = pytest.mark.slow

SHARDS = 4  # {s0} and {s1} on one master, {s2} and {s3} on one each


class Answers:
    """The sink's rule: an event whose id starts ``retry-`` fails until ``heal``; every post is kept."""

    def __init__(self) -> None:
        self.healed = threading.Event()

    def __call__(self, post: Received, earlier: list[Received]) -> tuple[int, float]:
        ids = [str(event.get("id")) for event in orjson.loads(post.body)["events"]]
        return (500 if any(i.startswith("retry-") for i in ids) and not self.healed.is_set() else 200), 0.0


cluster = cluster_fixture("module")


def _masters(cluster: RedisClusterFleet) -> list[str]:
    masters = cluster.masters()
    return [f"redis://{node.address}/0" for node in cluster.nodes if node.address in masters]


def _on_each_master(cluster: RedisClusterFleet, *command: str) -> list[Any]:
    answers = []
    for node in cluster.nodes:
        if node.address in cluster.masters():
            client = node.client(decode_responses=True)
            try:
                answers.append(client.execute_command(*command))  # type: ignore[no-untyped-call]
            finally:
                client.close()
    return answers


def _delivery(service_env: dict[str, str], appid: str, event_id: str, state: str, attempts: int) -> str | None:
    """The id of ``appid``'s delivery of ``event_id`` once it is in ``state`` after ``attempts`` attempts."""
    for delivery in ok(service_env, "deliveries", "list", appid)["deliveries"]:
        if delivery["event_ids"] == [event_id] and delivery["state"] == state and len(delivery["attempts"]) == attempts:
            return str(delivery["id"])
    return None


def test_every_script_runs_on_a_cluster_with_all_its_keys_in_one_slot(
    env: dict[str, str], sim: str, cluster: RedisClusterFleet
) -> None:
    service_env = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    service_env.update(
        SVCGW_REDIS_SHARDS=cluster.setting,
        SVCGW_CLUSTER_SHARDS=str(SHARDS),
        SVCGW_RETRY_SCHEDULE="0.1,60",  # a retry at once, then one that waits for "retry now"
        SVCGW_RATE_LIMIT="100000/minute",
        SVCGW_PROBE_INTERVAL="0.5",
        SVCGW_UPSTREAM_URL=sim,
    )
    settings = Settings.from_env(service_env)
    # A name of the version before one tag: the first process to start renames it (retag.lua).
    before = TwoTags("{s1}").dead_letters_by_appid("we_before")
    _on_each_master(cluster, "CONFIG", "RESETSTAT")
    run(_sadd(settings, before))
    answers = Answers()
    sink = Sink(rule=answers).start()
    processes: list[Any] = []
    watches = [ScriptKeyWatch(url) for url in _masters(cluster)]
    try:
        with contextlib.ExitStack() as watching:
            for watch in watches:
                watching.enter_context(watch)
            stack = start_stack(service_env, sim, subprocess=True)
            processes.append(stack)
            worker = Process(["worker"], service_env, "worker").start()
            processes.append(worker)
            probed, shard = _service_paths(stack, service_env, settings, sink, answers)
            worker.stop()
            run(_race_and_shutdown_paths(settings, stack.sim, probed, shard))
            stack.stop()
    except BaseException:
        for process in processes:
            process = getattr(process, "process", process)
            if isinstance(process, Process):
                print(f"--- {process.name}\n{process.output()[-3000:]}")
        raise
    finally:
        for process in processes:
            process.stop()
        sink.stop()
        _on_each_master(cluster, "FLUSHALL")  # the Cluster empty for the module's next test

    # Read before the checks below, whose COMMAND GETKEYS of commands without keys answer errors.
    errors = _on_each_master(cluster, "INFO", "errorstats")
    commands = _on_each_master(cluster, "INFO", "commandstats")
    calls = [call for watch in watches for call in watch.calls()]
    ran = {call.name for call in calls}
    assert ran == set(scripts.names()), (sorted(set(scripts.names()) - ran), sorted(ran - set(scripts.names())))
    assert sum(len(call.inner) for call in calls) > 200  # the watches saw what the scripts ran
    for watch in watches:
        assert watch.cross_slot() == []
        assert watch.undeclared() == []
    # No call refused for keys of several slots; no script failed on any master but for NOSCRIPT, which makes the
    # client load the script and call again. (A MOVED is followed by the client: the call ran on the right master.)
    for errors_of, commands_of in zip(errors, commands, strict=True):
        assert "errorstat_CROSSSLOT" not in errors_of, errors_of
        failed = sum(commands_of.get(f"cmdstat_{name}", {}).get("failed_calls", 0) for name in ("eval", "evalsha"))
        assert failed == errors_of.get("errorstat_NOSCRIPT", {}).get("count", 0), (errors_of, commands_of)
    for process in processes:
        output = getattr(process, "process", process).output()
        assert "CROSSSLOT" not in output and "non local key" not in output and "same slot" not in output


async def _sadd(settings: Settings, name: str) -> None:
    clients = role_clients(settings)
    try:
        await clients[1].redis.sadd(name, "we_before-1-0")
    finally:
        await aclose_all(clients)


def _service_paths(
    stack: Any, service_env: dict[str, str], settings: Settings, sink: Sink, answers: Answers
) -> tuple[str, int]:
    """What serve, the worker, the CLI and the console run for a deployment's everyday work; the instance
    reported offline, and its shard."""
    key = run(_account_with_quota(settings, sink.url))  # device/create reserves and holds a slot
    appids = [stack.create_device(key) for _ in range(SHARDS)]
    tokens = _tokens(settings, appids)
    assert {shard_of_token(token) or 0 for token in tokens.values()} == set(range(SHARDS))  # one on each shard
    probed, gapped, retried, stopped = appids

    def post(appid: str, body: dict[str, Any]) -> None:
        answer = httpx.post(f"{stack.base}{RECEIVER_PREFIX}{appid}/{tokens[appid]}", content=orjson.dumps(body),
                            timeout=10)  # fmt: skip
        assert answer.status_code == 200, answer.text

    for appid in appids:
        post(appid, {"event_type": "Msg", "events": [{"id": f"ev-{appid}"}]})
    post(gapped, {"event_type": "GapClosed", "events": [{"code": -11001, "message": "closed"}]})
    post(retried, {"event_type": "Msg", "events": [{"id": "retry-1"}]})

    # Liveness: a logged-in, started instance is probed; its reconnect fails and it is reported offline.
    stack.login(key, probed)
    started = stack.api(key, "long/start", {"appid": probed, "callbackUrl": sink.url, "pushHistory": False})
    assert started.status_code == 200 and started.json()["code"] == 0, started.text
    stack.sim_faults(appid=probed, drop=True, reconnect_fails=True)

    # A retry at once, then retry now, then dead; healed and replayed.
    due = wait_for(lambda: _delivery(service_env, retried, "retry-1", "retrying", 2), timeout=30,
                   what="the second attempt failed, the next a minute away")  # fmt: skip
    assert ok(service_env, "deliveries", "retry", due)["queued"] is True
    wait_for(lambda: [d["id"] for d in ok(service_env, "dlq", "list")] == [due], timeout=30, what="the dead letter")
    answers.healed.set()
    assert [row["status"] for row in ok(service_env, "dlq", "replay", due)] == ["replayed"]
    wait_for(lambda: _delivery(service_env, retried, "retry-1", "delivered", 4), timeout=30, what="the replay")

    def kinds() -> list[str]:
        return [post.headers["x-svc-event-type"] for post in sink.posts()]

    wait_for(lambda: kinds().count("InstanceOffline") >= 2, timeout=40,
             what="the InstanceOffline of the probed instance, at its address and its further destination")  # fmt: skip
    assert kinds().count("Msg") >= SHARDS + 1
    # The GapClosed post reached the primary address and the further destination (both the sink).
    wait_for(lambda: kinds().count("GapClosed") >= 2, timeout=30, what="the GapClosed post and its fan-out")

    # /metrics rebuilds its instance counts at the first scrape; an account given a password.
    assert httpx.get(f"{stack.base}/metrics", timeout=10).status_code == 200
    created = CliRunner().invoke(cli, ["accounts", "create", "--name", "console", "--login", "dev@example.com",
                                       "--password", "-", "--json"], env=service_env, input="a long password 1\n")
    assert created.exit_code == 0, created.output
    again = CliRunner().invoke(cli, ["accounts", "create", "--name", "other", "--login", "DEV@example.com"],
                               env=service_env)  # fmt: skip
    assert again.exit_code == 1 and "belongs to another account" in again.output, again.output
    # Signed in with the password twice from one browser: the second shows its device cookie, and the
    # known-browser lane looks the login up and reserves the attempt in one script, on a client of its own.
    with httpx.Client(base_url=stack.base, timeout=15) as browser:
        for _ in range(2):
            body = {"login": "dev@example.com", "password": "a long password 1"}
            signed_in = browser.post("/console/api/session", json=body)
            assert signed_in.status_code == 200, signed_in.text
    # The console: signed in with the key (its failure windows); changes, counted in the account's rate
    # windows: an instance stopped through the gateway, an address copied to the instance's shard.
    console = ConsoleClient(stack.base, key)
    try:
        answer = console.change("POST", f"/instances/{stopped}/stop")
        assert answer.status_code == 200 and answer.json()["data"]["stopped"] is True, answer.text
        answer = console.change("PUT", f"/instances/{stopped}/callback", json={"url": sink.url})
        assert answer.status_code == 200, answer.text
    finally:
        console.close()
    return probed, shard_of_token(tokens[probed]) or 0


async def _account_with_quota(settings: Settings, sink_url: str) -> str:
    """An account with a device quota, its default address and a further destination at the sink: its key."""
    async with sharded_store(settings) as store:
        account = await store.create_account("scripts", devices=10)
        await store.set_callback(Scope(account=account.id), sink_url)  # copied to every shard
        # A further destination taking GapClosed and InstanceOffline (copied to every shard): that post fans out in
        # the ingest script, that service event in queue_delivery.lua.
        url = check_for_service(sink_url, settings)
        await store.add_destination(Scope(account=account.id), url, event_types=["GapClosed", "InstanceOffline"])
        _, key = await store.create_key(account.id)
        return key


async def _destination_job(redis: Any, keys: KeySpace, settings: Settings, appid: str) -> str:
    """A delivery to a further destination of ``appid`` on its shard, as the data model writes one
    (tests.worker.support.destination_delivery), its destination's copy there, limited to 5 a second."""
    destination, delivery_id = "dst_0123456789abcdef", new_delivery_id()
    await redis.hset(
        keys.destination(destination),
        mapping={"url": "http://127.0.0.1:9/further", "secret": "whsec_x", "rate": "5", "enabled": "1"},
    )
    account = await redis.hget(keys.instance(appid), "account")
    await redis.hset(keys.delivery(delivery_id), mapping={
        "appid": appid, "account": account or b"", "event_type": "Msg", "body": b'{"events":[]}', "state": "queued",
        "received_at": repr(time.time()), "attempts": 0, "failures": 0, "events": 1, "destination": destination,
        "primary": "",
    })  # fmt: skip
    await redis.hset(keys.rq.job(delivery_id), mapping=job_fields(
        delivery_id, queue_name=settings.queue_name, description=job_description("Msg", appid),
        failure_ttl=settings.dead_letter_retention,
    ))  # fmt: skip
    await redis.rpush(keys.rq.queue(settings.queue_name), delivery_id)
    return delivery_id


async def _race_and_shutdown_paths(settings: Settings, upstream_url: str, appid: str, shard: int) -> None:
    """With the worker stopped: a service event queued and its chain advanced, as a finish that met an event
    queued meanwhile does; the claim handed back, as at a shutdown; a parked job brought forward, as when a
    destination being probed answers again; a probe claimed and given back."""
    clients = role_clients(settings)
    upstream = Upstream(upstream_url)
    try:
        redis, keys = clients[shard]
        queued = await transitions.go_online(redis, keys, settings, appid, auto_reconnected=True, at=time.time())
        assert queued is not None
        queue = DeliveryQueue(redis, keys, settings.queue_name, lease_seconds=settings.lease_seconds)
        assert await chainkeys.advance(redis, keys, keys.service_events(appid), queue.queue_key, queue.deferred_key,
                                       rq_now())  # fmt: skip
        claimed = [c.delivery_id for c in await queue.claim_batch(10, "stopping")]
        assert queued in claimed
        assert await queue.release(claimed) == len(claimed)
        # A further destination's job, under its rate: its read names the destination's hash and pace record.
        further = await _destination_job(redis, keys, settings, appid)
        claimed = [c.delivery_id for c in await queue.claim_batch(10, "stopping")]
        assert further in claimed and await redis.exists(keys.destination_pace("dst_0123456789abcdef"))
        assert await queue.release(claimed) == len(claimed)
        # A job held back for a destination being probed, brought forward as when it answers again.
        destination, later = "acc_0123456789abcdef http://hung.test:80", time.time() + 600
        await redis.zadd(keys.rq.scheduled(settings.queue_name), {"we_parked-1-0": later})
        await redis.zadd(keys.parked(destination), {"we_parked-1-0": later})
        assert await queue.unpark(destination) == (1, 0)
        await redis.zrem(keys.rq.scheduled(settings.queue_name), "we_parked-1-0")
        prober = Prober(settings, redis, keys, upstream)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            probes, _ = await prober.claim(1)
            if probes:
                await prober.release(probes[0])
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("no probe came due")
    finally:
        await upstream.aclose()
        await aclose_all(clients)


def test_each_accounts_failing_record_of_a_shared_host_is_kept_in_the_finish_calls_slot(
    env: dict[str, str], cluster: RedisClusterFleet
) -> None:
    """The finish script's failing part on a Cluster: two accounts' attempts to one host in one call, each
    account's record (``<account> <origin>``) in the hash the call names, in its slot; one account's failure
    flags its own record, the other's success ends nothing of it."""
    service_env = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    service_env.update(SVCGW_REDIS_SHARDS=cluster.setting, SVCGW_CLUSTER_SHARDS=str(SHARDS), SVCGW_FAILING_AFTER="1")
    # Failures are forgotten after failing_after plus the longest retry delay (svcgw.delivery.failingorigins):
    # with the tests' 0.2 s schedule, 1.2 s, which a Cluster client's first call can outlast after the record's
    # last failure (1 s before it) and make it start afresh. A long schedule keeps the record what it says.
    service_env["SVCGW_RETRY_SCHEDULE"] = "30"
    settings = Settings.from_env(service_env)
    watches = [ScriptKeyWatch(url) for url in _masters(cluster)]
    try:
        with contextlib.ExitStack() as watching:
            for watch in watches:
                watching.enter_context(watch)
            finished, records = run(_failing_at_one_host(settings))
    finally:
        _on_each_master(cluster, "FLUSHALL")
    assert [(f.started_failing, f.recovered) for f in finished] == [(True, False), (False, False)]
    (field, value), *others = records.items()
    assert field == failingorigins.name("acc_failing", SHARED_HOST).encode() and others == []
    assert value.endswith(b":1")  # flagged
    assert any(call.name == "queue_finish" for watch in watches for call in watch.calls())
    for watch in watches:
        assert watch.cross_slot() == []
        assert watch.undeclared() == []


SHARED_HOST = "https://shared.example:443"


async def _failing_at_one_host(settings: Settings) -> tuple[list[Finished], dict[bytes, bytes]]:
    """One finish call on a shard of its own master: an account's failed attempt to the shared host, failing
    for 5 s already, and another account's delivered one; the shard's failing hash after it."""
    clients = role_clients(settings)
    try:
        redis, keys = clients[2]
        mine = failingorigins.name("acc_failing", SHARED_HOST)
        theirs = failingorigins.name("acc_answering", SHARED_HOST)
        now = time.time()
        await redis.hset(keys.failing_origins, mine, f"{now - 5}:{now - 1}:0")
        queue = DeliveryQueue(redis, keys, settings.queue_name, lease_seconds=settings.lease_seconds,
                              failing_argument=failingorigins.script_argument(settings))  # fmt: skip
        record = b'{"attempt":1}'
        items = [
            Finish(new_delivery_id(), "we_failing", "retry", record, due=now + 600, retention=60, failing=mine),
            Finish(new_delivery_id(), "we_answering", "delivered", record, retention=60, failing=theirs),
        ]
        finished = await queue.finish_detailed(items)
        return finished, await redis.hgetall(keys.failing_origins)
    finally:
        await aclose_all(clients)
