"""Deliveries to further destinations, attempted by the real engine against real loopback sinks (docs/destinations.md).

Each goes to its destination's address, signed with the destination's own secret, with its Bearer token
and ``X-Svc-Destination``; the primary's headers are as they were. A destination that always fails is a
dead letter alone, and its replay reaches it alone; a disabled one's deliveries wait, pending, until it
is enabled; a removed one's fail at once; a rate limit holds across the run and in every second.
The deliveries are written as the data model says (``tests.worker.support.destination_delivery``).
An instance's service events (``InstanceOffline``, ``InstanceRecovered``, queued by the prober's flips)
go to the destinations that take them as a post does, each its own delivery; a failing one is a dead
letter alone and holds back none of the instance's later service events.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import Iterator
from dataclasses import replace

import orjson
import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from svcgw.config.settings import Settings
from svcgw.delivery.byid import show as show_delivery
from svcgw.delivery.listing import Delivery, list_deliveries
from svcgw.registry.destinations import DestinationChange, DestinationConfig
from svcgw.registry.store import Scope, Store
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from tests.conftest import Tenant, provision, with_store
from tests.support import Received, Sink, attempt_records, is_delivered, wait_for
from tests.svcgw.delivery.fanout import ingest_fanned
from tests.svcgw.delivery.test_deadletters import ingest, list_dead, replay
from tests.verify.conftest import PYTHON_LIB
from tests.worker.support import add_destination, deliver_all, destination_delivery, flip, kind, started
from tests.worker.test_engine import Running
from tests.worker.test_pipeline import secret_of
from worker.engine import Engine

TOKEN = "further-bearer-" + "t" * 16


@pytest.fixture
def further() -> Iterator[Sink]:
    """The further destination's sink, beside the primary address's (``sink``)."""
    server = Sink().start()
    yield server
    server.stop()


def _post_to_both(
    settings: Settings, redis: Redis, tenant: Tenant, destination: DestinationConfig, event_id: str
) -> tuple[str, str]:
    """One post to the primary address and ``destination``, through the receiver's ingest and its fan-out."""
    primary, (delivery_id,) = ingest_fanned(
        settings, tenant, b'{"event_type":"Msg","events":[{"id":"%s"}]}' % event_id.encode(), [destination.id]
    )
    assert delivery_id == f"{primary}_{destination.id.removeprefix('dst_')}"
    return primary, delivery_id


def show(settings: Settings, delivery_id: str) -> Delivery:
    async def run() -> Delivery:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            return await show_delivery(client, keys, settings, delivery_id)
        finally:
            await client.aclose()

    return asyncio.run(run())


def _stripe_style(secret: str, post: Received) -> bool:
    """The check a receiver writes by hand: HMAC-SHA256 of ``timestamp.body`` with the secret, hex."""
    stamp = post.headers["x-svc-timestamp"]
    expected = hmac.new(secret.encode(), stamp.encode() + b"." + post.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, post.headers["x-svc-signature"])


def _engine(settings: Settings) -> Engine:
    return Engine(settings, None, TokenVault.from_settings(settings))


def _change(settings: Settings, destination_id: str, change: DestinationChange) -> None:
    async def action(store: Store) -> None:
        await store.update_destination(destination_id, change)

    with_store(settings, action)


def test_a_destination_delivery_is_signed_with_its_own_secret_and_names_its_destination(
    settings: Settings, redis: Redis, sink: Sink, further: Sink
) -> None:
    # verify/python from its sources (tests.verify.conftest puts them on the path), not an installed copy.
    assert PYTHON_LIB.is_dir()
    from svcgw_verify import NO_MATCH, check, verify

    tenant = provision(settings, url=sink.url)
    destination = add_destination(settings, Scope(account=tenant.account), further.url, bearer_token=TOKEN)
    primary, delivery_id = _post_to_both(settings, redis, tenant, destination, "s1")
    deliver_all(_engine(settings))

    (post,) = further.posts()
    assert post.path == "/hook" and post.headers["x-svc-destination"] == destination.id
    assert post.headers["authorization"] == f"Bearer {TOKEN}"
    assert post.headers["x-svc-delivery-id"] == delivery_id and post.headers["x-svc-attempt"] == "1"
    assert destination.secret
    verify(post.body, post.headers, secrets=destination.secret, tolerance=300)
    assert _stripe_style(destination.secret, post)
    own_secret = secret_of(settings, tenant)
    assert check(post.body, post.headers, secrets=own_secret) == NO_MATCH  # not the primary's secret

    (first,) = sink.posts()
    assert first.body == post.body and first.headers["x-svc-delivery-id"] == primary
    assert "x-svc-destination" not in first.headers and "authorization" not in first.headers
    verify(first.body, first.headers, secrets=own_secret, tolerance=300)
    assert _stripe_style(own_secret, first)

    assert is_delivered(redis, delivery_id) and is_delivered(redis, primary)
    # Delivered, it keeps what the primary's keeps: no record, its bare outcome, told apart from the primary's.
    assert redis.exists(keys.rq.job(delivery_id)) == 0 and attempt_records(redis, delivery_id) == []
    shown = show(settings, delivery_id)
    assert shown.state == "delivered" and shown.destination == destination.id
    assert [(a.status, a.ok) for a in shown.attempts] == [(200, True)]
    assert show(settings, primary).destination is None and len(show(settings, primary).attempts) == 1
    counters = {k.decode(): int(v) for k, v in redis.hgetall(keys.metrics_counters).items()}
    assert counters["deliveries|delivered|destination"] == 1 and counters["deliveries|delivered"] == 1
    assert counters["delivery_attempts|delivered|destination"] == 1


def test_a_destination_that_always_fails_is_dead_alone_and_its_replay_reaches_it_alone(
    settings: Settings, redis: Redis, sink: Sink, further: Sink
) -> None:
    further.set(status=500)
    tenant = provision(settings, url=sink.url)
    destination = add_destination(settings, Scope(account=tenant.account), further.url)
    primary, delivery_id = _post_to_both(settings, redis, tenant, destination, "f1")
    deliver_all(_engine(settings))

    assert is_delivered(redis, primary) and len(sink.posts()) == 1
    assert [dead.id for dead in list_dead(settings, appid=tenant.appid)] == [delivery_id]
    # Its hash names no destination: its id does, for the dead letters' filter and their readers.
    assert redis.hget(keys.rq.job(delivery_id), "destination") is None
    (dead,) = list_dead(settings, appid=tenant.appid, destination=destination.id)
    assert dead.id == delivery_id and dead.destination == destination.id
    assert list_dead(settings, appid=tenant.appid, destination="primary") == []
    tries = len(settings.retry_schedule) + 1
    assert len(further.posts()) == tries and redis.hget(keys.delivery(delivery_id), "state") == b"dead"
    counters = {k.decode(): int(v) for k, v in redis.hgetall(keys.metrics_counters).items()}
    assert counters["dead_letters|destination"] == 1 and "dead_letters" not in counters

    further.set(status=200)
    (replayed,) = replay(settings, ids=[delivery_id])
    assert replayed.replayed
    deliver_all(_engine(settings))
    assert len(further.posts()) == tries + 1 and len(sink.posts()) == 1
    last = further.posts()[-1]
    assert last.headers["x-svc-destination"] == destination.id and last.headers["x-svc-delivery-id"] == delivery_id
    assert is_delivered(redis, delivery_id)


def test_a_removed_destinations_delivery_is_dead_at_once_and_so_is_its_replay(
    settings: Settings, redis: Redis, sink: Sink, further: Sink
) -> None:
    tenant = provision(settings, url=sink.url)
    destination = add_destination(settings, Scope(account=tenant.account), further.url)
    primary, delivery_id = _post_to_both(settings, redis, tenant, destination, "r1")

    async def remove(store: Store) -> None:
        await store.remove_destination(destination.id)

    with_store(settings, remove)
    deliver_all(_engine(settings))
    error = f"the destination {destination.id} was removed"
    assert is_delivered(redis, primary) and further.posts() == []
    (record,) = attempt_records(redis, delivery_id)  # no retries
    assert record["error"] == error and record["dst"] == destination.id and record["destination"] is None
    (dead,) = list_dead(settings, appid=tenant.appid)
    assert dead.id == delivery_id and dead.last_error == error

    assert replay(settings, ids=[delivery_id])[0].replayed
    deliver_all(_engine(settings))
    assert [r["error"] for r in attempt_records(redis, delivery_id)] == [error, error]
    assert redis.hget(keys.delivery(delivery_id), "state") == b"dead" and further.posts() == []


def test_a_disabled_destinations_deliveries_stay_pending_until_it_is_enabled(
    settings: Settings, redis: Redis, sink: Sink, further: Sink
) -> None:
    quick = replace(settings, disabled_recheck_seconds=0.3)
    tenant = provision(quick, url=sink.url)
    destination = add_destination(quick, Scope(account=tenant.account), further.url, enabled=False)
    pairs = [_post_to_both(quick, redis, tenant, destination, f"d{n}") for n in range(3)]
    scheduled = keys.rq.scheduled(quick.queue_name)
    with Running(quick):
        wait_for(lambda: len(sink.posts()) == 3, what="the primary deliveries")
        # Looked at again and handed back again, never attempted: still pending, in Redis.
        first = wait_for(lambda: redis.zscore(scheduled, pairs[0][1]), what="handed back")
        wait_for(lambda: (redis.zscore(scheduled, pairs[0][1]) or 0) > first, what="looked at again")
        for _, delivery_id in pairs:
            # A lean hash (named by its post) writes state, attempts and failures only once attempted.
            state = redis.hmget(keys.delivery(delivery_id), "state", "attempts", "failures")
            assert redis.exists(keys.delivery(delivery_id)) and state == [None, None, None], delivery_id
        assert further.posts() == []

        _change(quick, destination.id, DestinationChange(enabled=True))
        wait_for(lambda: len(further.posts()) == 3, timeout=10, what="the deliveries once enabled")
        wait_for(lambda: all(is_delivered(redis, d) for _, d in pairs), what="recorded as delivered")
    assert {p.headers["x-svc-delivery-id"] for p in further.posts()} == {d for _, d in pairs}


def test_a_destination_limited_to_20_a_second_gets_no_more_and_loses_nothing(
    settings: Settings, redis: Redis, sink: Sink, further: Sink
) -> None:
    rate, count = 20, 100
    tenant = provision(settings, url=sink.url)
    destination = add_destination(settings, Scope(account=tenant.account), further.url, rate=rate)
    primary = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"paced"}]}')
    body = redis.hget(keys.rq.job(primary), "body")
    assert body
    ids = {destination_delivery(redis, settings, tenant, destination.id, primary, body) for _ in range(count)}
    started = time.time()
    deliver_all(_engine(settings))

    posts = further.posts()
    assert sorted(p.headers["x-svc-delivery-id"] for p in posts) == sorted(ids)  # each once, none lost
    times = sorted(p.at for p in posts)
    elapsed = times[-1] - started
    assert count <= rate * (elapsed + 1) + 1, elapsed
    # The pace holds when each attempt starts (its record's time): arrivals at the sink also carry the
    # HTTP round trip, whose delays on a loaded machine can bring attempts of two seconds into one.
    starts = sorted(attempt_records(redis, i)[0]["at"] for i in ids)
    busiest = max(sum(1 for t in starts if start <= t < start + 1.0) for start in starts)
    assert busiest <= 2 * rate + 1, busiest
    # A job handed back is not an attempt: one attempt each.
    assert all(redis.hget(keys.delivery(i), "attempts") == b"1" for i in ids)
    print(f"\n{count} deliveries at {rate}/s: {starts[-1] - starts[0]:.2f}s first to last, busiest second {busiest}")


# --- service events ----------------------------------------------------------------------
SERVICE_EVENTS = ["InstanceOffline", "InstanceRecovered"]


def _seq(post: Received) -> int:
    (event,) = orjson.loads(post.body)["events"]
    return int(event["seq"])


def _by_seq(posts: list[Received]) -> list[Received]:
    """Deliveries to a further destination are not chained, as a post's are not: their events carry their order."""
    return sorted(posts, key=_seq)


def _listed(settings: Settings, appid: str, destination: str) -> list[Delivery]:
    async def run() -> list[Delivery]:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            page = await list_deliveries(client, keys, settings, appid, destination=destination)
            return list(page.deliveries)
        finally:
            await client.aclose()

    return asyncio.run(run())


def test_instance_offline_and_recovered_go_to_every_further_destination_that_takes_them(
    settings: Settings, redis: Redis, sink: Sink
) -> None:
    from svcgw_verify import verify

    sinks = {name: Sink().start() for name in ("oncall", "archive", "crm", "off")}
    try:
        tenant = started(settings, sink.url)
        account, own = Scope(account=tenant.account), Scope(appid=tenant.appid)
        oncall = add_destination(settings, account, sinks["oncall"].url, event_types=SERVICE_EVENTS, bearer_token=TOKEN)
        archive = add_destination(settings, own, sinks["archive"].url)  # the instance's own, every type
        crm = add_destination(settings, account, sinks["crm"].url, event_types=["Msg"])
        add_destination(settings, account, sinks["off"].url, enabled=False)
        offline = flip(settings, tenant.appid, offline=True)
        recovered = flip(settings, tenant.appid, offline=False)
        deliver_all(_engine(settings))

        primary = sink.posts()
        assert [kind(p) for p in primary] == SERVICE_EVENTS
        assert [p.headers["x-svc-delivery-id"] for p in primary] == [offline, recovered]
        assert all("x-svc-destination" not in p.headers for p in primary)
        assert sinks["crm"].posts() == [] and sinks["off"].posts() == []
        for destination in (oncall, archive):
            posts = _by_seq(sinks["oncall" if destination is oncall else "archive"].posts())
            assert [kind(p) for p in posts] == SERVICE_EVENTS, destination.id
            # The primary's body, its seq included; signed with the destination's own secret; its own delivery.
            assert [p.body for p in posts] == [p.body for p in primary]
            assert destination.secret
            for post in posts:
                assert post.headers["x-svc-destination"] == destination.id
                assert post.headers["x-svc-delivery-id"] not in (offline, recovered)
                verify(post.body, post.headers, secrets=destination.secret, tolerance=300)
            ids = [p.headers["x-svc-delivery-id"] for p in posts]
            assert all(is_delivered(redis, delivery_id) for delivery_id in ids)
            shown = [show(settings, delivery_id) for delivery_id in ids]
            assert [(d.destination, d.state, d.event_type) for d in shown] == [
                (destination.id, "delivered", name) for name in SERVICE_EVENTS
            ]
            # Listed as a post's are, under their destination.
            assert {d.id for d in _listed(settings, tenant.appid, destination.id)} == set(ids)
        assert sinks["oncall"].posts()[0].headers["authorization"] == f"Bearer {TOKEN}"
        assert "authorization" not in sinks["archive"].posts()[0].headers
        assert _listed(settings, tenant.appid, crm.id) == []
    finally:
        for each in sinks.values():
            each.stop()


def test_a_failing_destination_of_service_events_is_dead_alone_and_holds_back_none_of_them(
    settings: Settings, redis: Redis, sink: Sink, further: Sink
) -> None:
    further.set(status=500)
    tenant = started(settings, sink.url)
    oncall = add_destination(settings, Scope(account=tenant.account), further.url, event_types=SERVICE_EVENTS)
    offline = flip(settings, tenant.appid, offline=True)
    deliver_all(_engine(settings))
    (dead,) = list_dead(settings, appid=tenant.appid)
    assert dead.destination == oncall.id and dead.id != offline and is_delivered(redis, offline)
    assert len(further.posts()) == len(settings.retry_schedule) + 1

    # The instance's next service event is not held behind its destination's dead letter.
    recovered = flip(settings, tenant.appid, offline=False)
    deliver_all(_engine(settings))
    assert [p.headers["x-svc-delivery-id"] for p in sink.posts()] == [offline, recovered]
    assert is_delivered(redis, recovered)

    further.set(status=200)
    assert replay(settings, ids=[dead.id])[0].replayed
    deliver_all(_engine(settings))
    assert len(sink.posts()) == 2
    delivered = [p for p in further.posts() if p.headers["x-svc-delivery-id"] == dead.id]
    assert kind(delivered[-1]) == "InstanceOffline" and is_delivered(redis, dead.id)
