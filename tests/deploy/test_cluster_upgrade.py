"""An upgrade in place on a real Redis Cluster: the names of before, with two tags, lose nothing.

The version before put ``{s<i>}`` in front of every name of shard ``i`` and kept an instance's own
tag inside its names: ``{s1}svcgw:log:{<appid>}`` (tests.support_twotags). What it left is
written here by the service's own writers given those names, with its layout marker (``version``,
``since``, ``dedup``, ``tags``; no ``one_tag``), on a Cluster of three masters and four virtual
shards: pending, retrying, delivered and dead deliveries, their de-duplication ids, log entries and
outcome, a service event in its chain with one waiting behind it, and an e-mail login with braces.
Then real ``svcgw serve`` and ``svcgw worker`` processes of this version start on it
(:func:`svcgw.storage.renames.one_tag`, run by each process's first read of a shard's marker), and:

* each pending and retrying delivery is delivered once; the dead one is listed and replayed;
* the log and the deliveries list show every post, the attempts of before with them;
* the old event ids are still refused as repeats; the service events keep their order and seq;
* no key of any master keeps a second tag (but the login, whose braces are data), and every
  shard's marker says ``one_tag``.

And a key under both names (written by a process of this version before the rename) is merged
by its type.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
from redis.exceptions import WatchError

from svcgw.config.settings import Settings
from svcgw.delivery import chainkeys, failingorigins
from svcgw.delivery.attempt import Attempt
from svcgw.delivery.queue import DeliveryQueue, Finish
from svcgw.delivery.queueing import queue_delivery
from svcgw.deliveryid import new_delivery_id
from svcgw.intake.ingest import Ingest
from svcgw.intake.receivers import RECEIVER_PREFIX
from svcgw.registry.credentials import Credentials
from svcgw.registry.store import Scope
from svcgw.shards.clients import ShardRedis, aclose_all, role_clients
from svcgw.storage import layoutversion
from svcgw.storage.keys import KeySpace
from svcgw.storage.rqformat import exc_info_field
from tests.cli.commands import ok
from tests.conftest import run
from tests.deploy.redis_fleet import RedisClusterFleet, cluster_fixture, sharded_store
from tests.support import Process, Sink, start_server, wait_for
from tests.support_twotags import TwoTags, old_marker

pytestmark = pytest.mark.slow

SHARDS = 4  # {s0} and {s1} on one master, {s2} and {s3} on one each
ONE, TWO = "we_upgraded1", "we_upgraded2"  # on shards 1 and 2
LOGIN = "a{b}c@example.com"  # braces that are data: the name keeps them
# A name with a second {…} after the shard's tag.
_TWO_TAGS = re.compile(rb"^\{[^{}]*\}.*\{[^{}]*\}")


cluster = cluster_fixture("module")


@pytest.fixture
def cluster_env(env: dict[str, str], cluster: RedisClusterFleet) -> Iterator[dict[str, str]]:
    configured = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    configured.update(SVCGW_REDIS_SHARDS=cluster.setting, SVCGW_CLUSTER_SHARDS=str(SHARDS))
    yield configured
    for client in _masters(cluster):  # the next test starts from an empty Cluster
        try:
            client.flushall()
        finally:
            client.close()


def _masters(cluster: RedisClusterFleet) -> list[Any]:
    masters = cluster.masters()
    return [node.client() for node in cluster.nodes if node.address in masters]


def every_key(cluster: RedisClusterFleet) -> list[bytes]:
    """Every key of every master (SCAN of each)."""
    found: list[bytes] = []
    for client in _masters(cluster):
        try:
            found.extend(client.scan_iter(count=1000))
        finally:
            client.close()
    return found


def two_tagged(cluster: RedisClusterFleet) -> set[bytes]:
    return {name for name in every_key(cluster) if _TWO_TAGS.match(name)}


# --- what the version before left ---------------------------------------------------------------
@dataclass(frozen=True)
class Before:
    account: str
    tokens: dict[str, str]
    retried: str
    done: str
    died: str
    pending: str
    other: str  # TWO's post
    offline: str  # TWO's service events: the first in its chain, the second waiting behind it
    recovered: str
    since: int  # the marker's since and tags


def _record(number: int, status: int) -> bytes:
    error = None if status < 300 else f"HTTP {status}"
    return Attempt(ok=status < 300, at=time.time(), duration=0.02, status=status, error=error,
                   response="answer before the upgrade", destination="127.0.0.1").record(number)  # fmt: skip


async def _post(ingest: Ingest, appid: str, token: str, event_id: str) -> str:
    body = orjson.dumps({"event_type": "Msg", "events": [{"id": event_id, "text": "before the upgrade"}]})
    result = await ingest.accept(appid, token, body)
    assert result.delivery_id is not None and result.accepted == 1
    return result.delivery_id


async def _service_event(shard: ShardRedis, settings: Settings, appid: str, account: str, kind: str) -> tuple[str, int]:
    """A service event queued as a liveness flip queues it, in the instance's chain: its id and seq.

    As the flip does (svcgw.liveness.transitions), the chain is watched while it is read, and read
    again when a worker delivered one of its events meanwhile.
    """
    redis, keys = shard
    delivery_id = new_delivery_id()
    async with redis.pipeline(transaction=True) as pipe:
        while True:
            try:
                await pipe.watch(keys.service_events(appid))
                chain = chainkeys.members(await pipe.lrange(keys.service_events(appid), 0, -1))
                pipe.multi()  # type: ignore[no-untyped-call]
                queue_delivery(pipe, keys, settings, appid=appid, account=account, event_type=kind,
                               events=[{"id": f"{kind}-{delivery_id[-6:]}"}], delivery_id=delivery_id,
                               now=time.time(), chain=chain)  # fmt: skip
                (seq,) = await pipe.execute()
                return delivery_id, int(seq)
            except WatchError:
                continue


async def _write_before(settings: Settings, sink_url: str) -> Before:
    clients = role_clients(settings)
    try:
        async with sharded_store(settings) as store:
            account = (await store.create_account("before the upgrade", devices=None)).id
            await store.set_callback(Scope(account=account), sink_url)  # copied to every shard
            await store.set_login(account, LOGIN)
            tokens = {ONE: await store.register_instance(ONE, account, 1),
                      TWO: await store.register_instance(TWO, account, 2)}  # fmt: skip
        # The marker as that version left it, and for the while this version's writers write as it did,
        # ``one_tag`` (they would rename first without it): taken off once they are done.
        since = int(time.time()) - 3 * 86400
        for redis, keys in clients:
            await redis.hset(keys.layout, mapping=dict(old_marker(since, since), one_tag="0"))
        redis = clients[1].redis
        one, two = TwoTags(clients[1].keys.tag), TwoTags(clients[2].keys.tag)

        ingest = Ingest(redis, one, settings)
        retried, done, died = [await _post(ingest, ONE, tokens[ONE], event_id)
                               for event_id in ("u-retrying", "u-delivered", "u-dead")]  # fmt: skip
        queue = DeliveryQueue(redis, one, settings.queue_name, lease_seconds=settings.lease_seconds,
                              failing_argument=failingorigins.script_argument(settings),
                              log_retention=settings.log_retention)  # fmt: skip
        assert [c.delivery_id for c in await queue.claim_batch(3, "worker-before")] == [retried, done, died]
        ttl = settings.dead_letter_retention
        ended = await queue.finish_detailed([
            Finish(retried, ONE, "retry", _record(1, 503), due=time.time() + 1, retention=3600),
            Finish(done, ONE, "delivered", _record(1, 200), retention=3600, event_ids=b'["u-delivered"]'),
            Finish(died, ONE, "dead", _record(1, 500), due=time.time() + ttl, retention=ttl,
                   error=exc_info_field("HTTP 500")),
        ])  # fmt: skip
        assert [finished.held for finished in ended] == [True, True, True]
        pending = await _post(ingest, ONE, tokens[ONE], "u-pending")
        await ingest.aclose()

        other_ingest = Ingest(redis, two, settings)
        other = await _post(other_ingest, TWO, tokens[TWO], "u-other")
        await other_ingest.aclose()
        offline, first = await _service_event(ShardRedis(redis, two), settings, TWO, account, "InstanceOffline")
        recovered, second = await _service_event(ShardRedis(redis, two), settings, TWO, account, "InstanceRecovered")
        assert (first, second) == (1, 2)
        for redis, keys in clients:
            await redis.hdel(keys.layout, "one_tag")
        return Before(account, tokens, retried, done, died, pending, other, offline, recovered, since)
    finally:
        await aclose_all(clients)


def _markers(settings: Settings) -> list[dict[bytes, bytes]]:
    async def read() -> list[dict[bytes, bytes]]:
        clients = role_clients(settings)
        try:
            return [await redis.hgetall(keys.layout) for redis, keys in clients]
        finally:
            await aclose_all(clients)

    return run(read())


# --- the upgrade ------------------------------------------------------------------------------------
def test_an_upgrade_of_a_clusters_names_with_two_tags_loses_nothing(
    cluster_env: dict[str, str], cluster: RedisClusterFleet
) -> None:
    settings = Settings.from_env(cluster_env)
    sink = Sink().start()
    processes: list[Process] = []
    try:
        before = run(_write_before(settings, sink.url))
        left = two_tagged(cluster)
        assert {b"{s1}svcgw:log:{%s}" % ONE.encode(), b"{s1}svcgw:out:{%s}" % ONE.encode(),
                b"{s1}svcgw:dead:{%s}" % ONE.encode(), b"{s2}svcgw:instance:{%s}:service-events" % TWO.encode(),
                b"{s2}svcgw:instance:{%s}:seq" % TWO.encode()} <= left  # fmt: skip
        assert any(name.startswith(b"{s1}svcgw:dd:{%s}:" % ONE.encode()) for name in left)
        assert all(b"one_tag" not in marker and b"tags" in marker for marker in _markers(settings))

        # This version: the HTTP server and two workers, each reading the shards' markers at its start.
        server, base = start_server(cluster_env)
        processes.append(server)
        processes += [Process(["worker"], cluster_env, name).start() for name in ("worker-a", "worker-b")]
        wait_for(lambda: all(b"one_tag" in marker for marker in _markers(settings)), timeout=60,
                 what="every shard's keys given one tag")  # fmt: skip
        # A service event of this version, under the instance's name of now: behind those of before.
        later, seq = run(_later_event(settings, before))
        assert seq == 3

        def sent() -> Counter[str]:
            return Counter(post.headers["x-svc-delivery-id"] for post in sink.posts())

        queued = {before.retried, before.pending, before.other, before.offline, before.recovered, later}
        wait_for(lambda: queued <= set(sent()), timeout=60, what="the pending and retrying deliveries of before")
        (dead,) = ok(cluster_env, "dlq", "list")
        assert (dead["id"], dead["appid"]) == (before.died, ONE)
        assert [row["status"] for row in ok(cluster_env, "dlq", "replay", before.died)] == ["replayed"]
        wait_for(lambda: before.died in sent(), timeout=30, what="the replayed dead letter of before")

        # The event ids of before are still repeats: only the new one goes.
        again = orjson.dumps({"event_type": "Msg", "events": [{"id": i} for i in
                              ("u-pending", "u-retrying", "u-delivered", "u-dead", "u-new")]})  # fmt: skip
        answer = httpx.post(f"{base}{RECEIVER_PREFIX}{ONE}/{before.tokens[ONE]}", content=again, timeout=10)
        assert answer.status_code == 200 and answer.json()["data"] == {"accepted": 1, "duplicates": 4}, answer.text
        page = wait_for(lambda: _all_delivered(cluster_env, 5), timeout=30, what="the new post delivered")
        fresh = page[0]["id"]

        assert sorted(sent().items()) == sorted((i, 1) for i in (*queued, before.died, fresh))  # each once
        service = [(p.headers["x-svc-delivery-id"], orjson.loads(p.body)) for p in sink.posts()]
        assert [(i, body["events"][0]["seq"]) for i, body in service if body["event_type"] != "Msg"] == [
            (before.offline, 1), (before.recovered, 2), (later, 3)]  # fmt: skip

        # The log and the deliveries list: every post, newest first, with the attempts of before.
        assert [d["id"] for d in page] == [fresh, before.pending, before.died, before.done, before.retried]
        assert [d["event_ids"] for d in page] == [["u-new"], ["u-pending"], ["u-dead"], ["u-delivered"],
                                                  ["u-retrying"]]  # fmt: skip
        assert [[a["status"] for a in d["attempts"]] for d in page] == [[200], [200], [500, 200], [200], [503, 200]]
        logged = ok(cluster_env, "log", ONE)
        assert [(e["delivery_id"], e["accepted"], e["duplicates"]) for e in logged] == [
            (fresh, 1, 4), (before.pending, 1, 0), (before.died, 1, 0), (before.done, 1, 0), (before.retried, 1, 0)]
        assert [d["state"] for d in ok(cluster_env, "deliveries", "list", TWO)["deliveries"]] == ["delivered"] * 4

        # Nothing keeps a second tag but the login, whose braces are its own; every marker says one_tag.
        assert two_tagged(cluster) == {KeySpace("{s0}").login(LOGIN).encode()}
        assert run(_login_account(settings)) == before.account
        for marker in _markers(settings):
            kept = {k.decode(): v.decode() for k, v in marker.items() if k != b"one_tag"}
            assert kept == old_marker(before.since, before.since)
            assert int(marker[b"one_tag"]) >= int(time.time()) - 120
    except BaseException:
        for process in processes:
            print(f"--- {process.name}\n{process.output()[-3000:]}")
        raise
    finally:
        for process in processes:
            process.stop()
        sink.stop()


def _all_delivered(service_env: dict[str, str], count: int) -> list[dict[str, Any]] | None:
    page: list[dict[str, Any]] = ok(service_env, "deliveries", "list", ONE)["deliveries"]
    return page if len(page) == count and all(d["state"] == "delivered" for d in page) else None


async def _later_event(settings: Settings, before: Before) -> tuple[str, int]:
    clients = role_clients(settings)
    try:
        return await _service_event(clients[2], settings, TWO, before.account, "InstanceOffline")
    finally:
        await aclose_all(clients)


async def _login_account(settings: Settings) -> str | None:
    clients = role_clients(settings, decode=True)
    try:
        found = await Credentials(clients[0].redis, clients[0].keys).lookup(LOGIN)
        return None if found is None else found.account
    finally:
        await aclose_all(clients)


# --- a key under both names -------------------------------------------------------------------------
def test_keys_under_both_names_are_merged_by_their_type_and_every_batch_is_renamed(
    cluster_env: dict[str, str], cluster: RedisClusterFleet, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker whose start found its shard down writes names of now before the rename; a shard with
    more names than one script call takes (svcgw.storage.renames.BATCH) is renamed in several."""
    settings = Settings.from_env(cluster_env)
    many = [f"we_many{i}" for i in range(250)]

    async def go() -> dict[str, Any]:
        clients = role_clients(settings)
        redis, new = clients[3]
        old = TwoTags(new.tag)
        try:
            await redis.hset(new.layout, mapping=old_marker(1000, 1000))
            await redis.xadd(old.callback_log("we_a"), {"body": b"before"}, id="1000-0")
            await redis.xadd(new.callback_log("we_a"), {"body": b"after"}, id="2000-0")
            await redis.expire(old.callback_log("we_a"), 100)
            await redis.expire(new.callback_log("we_a"), 900)
            await redis.xadd(old.outcomes("we_a"), {"l": b"1000-0", "o": b"5:200:3"}, id="1005-0")
            await redis.xadd(new.outcomes("we_a"), {"l": b"2000-0", "o": b"7:200:3"}, id="2007-0")
            await redis.sadd(old.dead_letters_by_appid("we_a"), "we_a-1000-0")
            await redis.sadd(new.dead_letters_by_appid("we_a"), "we_a-2000-0")
            await redis.rpush(old.service_events("we_a"), "dlv_before")
            await redis.rpush(new.service_events("we_a"), "dlv_after")
            await redis.set(old.service_event_seq("we_a"), 7)
            await redis.set(new.service_event_seq("we_a"), 1)
            await redis.hset(old.dedup_bucket("we_a", 20000), mapping={"f1": "1", "f2": "1"})
            await redis.hset(new.dedup_bucket("we_a", 20000), mapping={"f2": "1", "f3": "1"})
            # Logs that overlap in time (processes of both versions at once): the new one stays as it is.
            await redis.xadd(old.callback_log("we_b"), {"body": b"old"}, id="3000-0")
            await redis.xadd(new.callback_log("we_b"), {"body": b"new"}, id="2000-0")
            async with redis.pipeline(transaction=False) as pipe:
                for appid in many:
                    pipe.sadd(old.dead_letters_by_appid(appid), f"{appid}-1-0")
                await pipe.execute()

            await layoutversion.read(redis, new)
            await layoutversion.read(redis, new)  # a second process: nothing left to do
            return {
                "log": await redis.xrange(new.callback_log("we_a")),
                "log ttl": await redis.ttl(new.callback_log("we_a")),
                "outcomes": [i for i, _ in await redis.xrange(new.outcomes("we_a"))],
                "dead": await redis.smembers(new.dead_letters_by_appid("we_a")),
                "chain": await redis.lrange(new.service_events("we_a"), 0, -1),
                "seq": await redis.get(new.service_event_seq("we_a")),
                "dedup": await redis.hgetall(new.dedup_bucket("we_a", 20000)),
                "overlapping": (await redis.xrange(new.callback_log("we_b")),
                                await redis.xlen(old.callback_log("we_b"))),
                "many": [await redis.smembers(new.dead_letters_by_appid(appid)) for appid in many],
                "marker": await redis.hget(new.layout, "one_tag"),
            }
        finally:
            await aclose_all(clients)

    with caplog.at_level(logging.INFO, logger="svcgw"):
        found = run(go())
    assert found["log"] == [(b"1000-0", {b"body": b"before"}), (b"2000-0", {b"body": b"after"})]
    assert 100 < found["log ttl"] <= 900  # the later expiry
    assert found["outcomes"] == [b"1005-0", b"2007-0"]
    assert found["dead"] == {b"we_a-1000-0", b"we_a-2000-0"}
    assert found["chain"] == [b"dlv_before", b"dlv_after"]  # the older first
    assert found["seq"] == b"7"  # no seq given twice
    assert found["dedup"] == {b"f1": b"1", b"f2": b"1", b"f3": b"1"}
    assert found["overlapping"] == ([(b"2000-0", {b"body": b"new"})], 1)
    assert found["many"] == [{f"{appid}-1-0".encode()} for appid in many]
    assert found["marker"] is not None
    # Only the log that could not be merged keeps its name of before, and the start says so.
    assert two_tagged(cluster) == {TwoTags("{s3}").callback_log("we_b").encode()}
    renamed = [r for r in caplog.records if r.getMessage() == "shard keys given one tag"]
    assert [(r.keys, r.renamed, r.merged) for r in renamed] == [(257, 250, 6)]  # type: ignore[attr-defined]
    assert any("keep their names until their retention ends" in r.getMessage() for r in caplog.records)
