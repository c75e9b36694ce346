"""Every script on the delivery path and the gateway's names, in KEYS, every key it touches (seen by a real Redis).

The rule that lets a shard's keys share one hash tag (docs/redis-layout.md, "Scripts and their
KEYS"): the receiver's ingest, the worker's claim, read, finish, promotion and release, the
service events' chain, the prober, retry now and replay, and the gateway's admission all run here
against a real Redis under ``MONITOR`` (tests.scriptkeys), with the real app and worker.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import httpx
import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from svcgw.config.settings import Settings
from svcgw.delivery import breaker, deadletters, failingorigins
from svcgw.delivery.replay import replay
from svcgw.delivery.retrynow import NotRetrying, retry_now
from svcgw.liveness import transitions
from svcgw.registry.store import Scope, Store
from svcgw.shards.clients import ShardRedis
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from tests.conftest import provision, with_store
from tests.receiver.console.conftest import ConsoleClient
from tests.receiver.gateway.stack import sim as sim  # the module's simulator fixture
from tests.receiver.gateway.stack import start_stack
from tests.scriptkeys import ScriptKeyWatch
from tests.support import Sink, ThreadedWorker, is_delivered, wait_for
from tests.svcgw.delivery.fanout import ingest_fanned
from tests.svcgw.delivery.test_deadletters import ingest
from tests.worker.support import add_destination, claim_batch, deliver_all, destination_delivery, flip, started
from worker.engine import Engine

pytestmark = pytest.mark.slow


def _dead(settings: Settings, appid: str) -> list[str]:
    async def go() -> list[str]:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            return [d.id for d in await deadletters.list_dead([ShardRedis(client, keys)], settings, appid=appid)]
        finally:
            await client.aclose()

    return asyncio.run(go())


def _run(settings: Settings, action: str, delivery_id: str) -> None:
    async def go() -> None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            if action == "replay":
                await replay(client, keys, settings, ids=[delivery_id])
            else:
                await retry_now(client, keys, settings, delivery_id)
        finally:
            await client.aclose()

    asyncio.run(go())


def _started_now(settings: Settings, appid: str) -> None:
    async def go() -> None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            await transitions.mark_started(client, keys, appid, 0.0)
        finally:
            await client.aclose()

    asyncio.run(go())


def _retried_now(settings: Settings, redis: Redis, appid: str) -> bool:
    """Retry now the instance's delivery once it waits for a retry (they are 0.2 s apart: it may have gone on)."""
    scheduled = [d.decode() for d in redis.zrange(keys.rq.scheduled(settings.queue_name), 0, -1)]
    mine = [d for d in scheduled if d.startswith(appid + "-")]
    if not mine:
        return False
    (delivery_id,) = mine
    try:
        _run(settings, "retry_now", delivery_id)
    except NotRetrying:
        return False
    return True


def test_the_delivery_path_touches_only_the_keys_its_scripts_name(
    settings: Settings, redis_url: str, redis: Redis, server: str, sink: Sink
) -> None:
    live = started(settings, sink.url)
    probed = provision(settings, url=sink.url)
    default_only = provision(settings)
    refused = provision(settings, url="http://127.0.0.1:9/hook")
    with ScriptKeyWatch(redis_url) as watch:
        _started_now(settings, probed.appid)  # probed at once, by an upstream that does not answer
        worker = ThreadedWorker(settings).start()
        try:
            # Posts: one delivered, one repeat refused as a duplicate, one to a refused address.
            for tenant, body in (
                (live, b'{"event_type":"Msg","events":[{"id":"a"},{"id":"b"}]}'),
                (live, b'{"event_type":"Msg","events":[{"id":"a"}]}'),
                (refused, b'{"event_type":"Msg","events":[{"id":"x"}]}'),
                (default_only, b'{"event_type":"Msg","events":[{"id":"d"}]}'),
            ):
                answer = httpx.post(tenant.receiver_url(server), content=body, timeout=10)
                assert answer.status_code == 200, answer.text
            # A service event, through the chain.
            flip(settings, live.appid, offline=True)
            wait_for(lambda: len(sink.posts()) >= 2, what="the post and the service event delivered")
            # The refused address's delivery is retried now, retries until it is dead, and is replayed.
            wait_for(lambda: _retried_now(settings, redis, refused.appid), what="a retry moved to now")
            (dead,) = wait_for(lambda: _dead(settings, refused.appid), what="the dead letter")
            _run(settings, "replay", dead)
            wait_for(lambda: _dead(settings, refused.appid), what="dead again")
            # The probed instance's probes ran (and failed: the upstream does not answer).
            wait_for(lambda: redis.hget(keys.instance(probed.appid), "last_probe"), what="a probe")
            # The account without any address: its delivery is read with the account's (empty) default.
            wait_for(lambda: _dead(settings, default_only.appid), what="the addressless delivery dead")
        finally:
            worker.stop()
    assert is_delivered(redis, sink.posts()[0].headers["x-svc-delivery-id"])

    ran = Counter(call.name for call in watch.calls())
    for script in ("ingest", "queue_claim", "queue_read", "queue_finish", "queue_promote", "queue_delivery", "replay",
                   "retry_now", "probe_claim", "probe_finish", "liveness_started", "liveness_count"):  # fmt: skip
        assert ran[script] > 0, f"{script} did not run: {dict(ran)}"
    assert sum(len(call.inner) for call in watch.calls()) > 50  # the watch saw what the scripts ran
    assert watch.undeclared() == []


def test_probing_touches_only_the_keys_its_scripts_name(env: dict[str, str], redis_url: str, redis: Redis) -> None:
    # A destination that never answers is probed, its jobs parked; when it answers they are brought forward.
    settings = Settings.from_env(
        dict(env, SVCGW_DELIVERY_TIMEOUT="1", SVCGW_DESTINATION_CONCURRENCY="2", SVCGW_RETRY_SCHEDULE="30,30")
    )
    target = Sink().start()
    target.set(delay=30)
    try:
        tenant = provision(settings, url=target.url)
        for n in range(30):
            answer = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"p%d"}]}' % n)
            assert answer
        destination = breaker.name(tenant.account, target.url.removesuffix("/hook"))
        with ScriptKeyWatch(redis_url) as watch:
            worker = ThreadedWorker(settings).start()
            try:
                wait_for(lambda: redis.zcard(keys.parked(destination)) > 10, timeout=10, what="jobs parked")
                target.set(delay=0)
                wait_for(lambda: redis.zcard(keys.parked(destination)) == 0 and len(target.posts()) >= 25,
                         timeout=15, what="the parked jobs brought forward and delivered")  # fmt: skip
            finally:
                worker.stop()
    finally:
        target.stop()
    ran = Counter(call.name for call in watch.calls())
    for script in ("queue_claim", "queue_read", "queue_finish", "breaker_read", "queue_unpark"):
        assert ran[script] > 0, f"{script} did not run: {dict(ran)}"
    assert watch.undeclared() == []


def test_failing_records_are_kept_per_account_in_the_key_the_finish_script_names(
    env: dict[str, str], redis_url: str, redis: Redis
) -> None:
    # Two accounts' endpoints on one host: one's answer 500, the other's 200.
    settings = Settings.from_env(dict(env, SVCGW_FAILING_AFTER="1", SVCGW_RETRY_SCHEDULE="0.2,0.2,0.2,600"))
    host = Sink(rule=lambda post, earlier: ((500 if post.path.startswith("/failing/") else 200), 0.0)).start()
    base = host.url.removesuffix("/hook")
    failing, answering = provision(settings, url=f"{base}/failing/a"), provision(settings, url=f"{base}/answering/b")
    origin = failingorigins.origin_of(host.url)
    try:
        with ScriptKeyWatch(redis_url) as watch:
            worker = ThreadedWorker(settings).start()
            try:
                ids = [ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"k%d"}]}' % n)
                       for n in range(2) for tenant in (failing, answering)]  # fmt: skip
                wait_for(lambda: all(is_delivered(redis, d) for d in ids[1::2]), what="the answering account's")
                wait_for(lambda: len([p for p in host.posts() if p.path.startswith("/failing/")]) >= 8,
                         what="the failing account's four attempts each")  # fmt: skip
            finally:
                worker.stop()
    finally:
        host.stop()
    finishes = [call for call in watch.calls() if call.name == "queue_finish"]
    assert finishes and watch.undeclared() == []
    # Every field of the failing hash the finish script read or wrote is one account's record of the host.
    fields = {c[2] for call in finishes for c in call.inner if c[1:2] == [keys.failing_origins.encode()]}
    mine = failingorigins.name(failing.account, origin)
    assert fields == {mine.encode(), failingorigins.name(answering.account, origin).encode()}
    assert redis.hkeys(keys.failing_origins) == [mine.encode()]


def test_the_gateways_calls_touch_only_the_keys_the_admission_names(
    env: dict[str, str], sim: str, redis_url: str, redis: Redis
) -> None:
    stack = start_stack(env, sim)
    try:
        account, key = stack.account()
        stranger, stranger_key = stack.account()
        with ScriptKeyWatch(redis_url) as watch:
            # Calls made with keys: the first of each key learns its id and account, the others
            # name them at once; with the instance's owner read, and without (device/create).
            appid = stack.create_device(key)
            for _ in range(3):
                answer = stack.api(key, "user/getProfile", {"appid": appid})
                assert answer.status_code == 200, answer.text
            for _ in range(2):
                assert stack.api(stranger_key, "user/getProfile", {"appid": appid}).json()["code"] == -40404
            assert stack.api("sk_unknown", "user/getProfile", {"appid": appid}).status_code == 401
            # A call made for the account signed in to the console.
            console = ConsoleClient(stack.base, key)
            try:
                stopped = console.change("POST", f"/instances/{appid}/stop")
                assert stopped.status_code == 200 and stopped.json()["data"]["stopped"] is True, stopped.text
            finally:
                console.close()
    finally:
        stack.stop()

    admitted = [call for call in watch.calls() if call.name == "gateway_admit"]
    assert len(admitted) >= 8, [call.name for call in watch.calls()]
    # Each account's keys were named: the rate windows both accounts' calls counted in.
    named = {arg.decode() for call in admitted for arg in call.call}
    assert {keys.account_denied(account), keys.account_denied(stranger), keys.api_key_lookup("")} <= named
    assert sum(len(call.inner) for call in admitted) > 30
    assert watch.undeclared() == []


def test_the_watch_sees_a_key_a_script_does_not_name(redis_url: str, redis: Redis) -> None:
    with ScriptKeyWatch(redis_url) as watch:
        redis.eval("redis.call('SET', KEYS[1], 1); return redis.call('GET', 'svcgw:unnamed')", 1, "svcgw:named")
    assert [(key, command) for _, command, key in watch.undeclared()] == [("svcgw:unnamed", b"GET")]


def test_the_claims_of_further_destinations_touch_only_the_keys_their_scripts_name(
    settings: Settings, redis_url: str, redis: Redis, sink: Sink
) -> None:
    # Their jobs name the destination's hash and pace record in place of the callback hashes: started,
    # paced (the record written), held while disabled, started with no address once removed, then
    # delivered or dead through the finish.
    tenant = provision(settings, url=sink.url)
    account = Scope(account=tenant.account)
    paced, gone, disabled = (add_destination(settings, account, sink.url, rate=5),
                             add_destination(settings, account, sink.url),
                             add_destination(settings, account, sink.url, enabled=False))  # fmt: skip
    primary = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"k1"}]}')
    body = redis.hget(keys.rq.job(primary), "body")
    assert body
    made = {destination.id: [destination_delivery(redis, settings, tenant, destination.id, primary, body)
                             for _ in range(count)]
            for destination, count in ((paced, 8), (gone, 1), (disabled, 1))}  # fmt: skip
    # And a post's deliveries as the fan-out writes them, named by the post: one delivered, one dead.
    ingest_fanned(settings, tenant, b'{"event_type":"Msg","events":[{"id":"k2"}]}', [paced.id, gone.id])

    async def remove(store: Store) -> None:
        await store.remove_destination(gone.id)

    with_store(settings, remove)
    with ScriptKeyWatch(redis_url) as watch:
        claimed = claim_batch(settings, 50)
        assert {job.destination_id for job in claimed} == {"", paced.id, gone.id}
        assert redis.exists(keys.destination_pace(paced.id))
        for job in claimed:  # back in the queue, to be attempted by the engine
            redis.zrem(keys.inflight(settings.queue_name), job.delivery_id)
            redis.rpush(keys.rq.queue(settings.queue_name), job.delivery_id)
        # Enabled again, and due now rather than in SVCGW_DISABLED_RECHECK_SECONDS.
        redis.hset(keys.destination(disabled.id), "enabled", "1")
        redis.zadd(keys.rq.scheduled(settings.queue_name), dict.fromkeys(made[disabled.id], time.time()))
        deliver_all(Engine(settings, None, TokenVault.from_settings(settings)))
    assert len(sink.posts()) == 2 + 9 + 1
    ran = Counter(call.name for call in watch.calls())
    assert ran["queue_read"] > 2 and ran["queue_finish"] > 0
    assert watch.undeclared() == []
