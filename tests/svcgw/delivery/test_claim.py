"""The claim: ids popped and leased, then read and started under keys named from them (svcgw.delivery.claim)."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.delivery import pacing
from svcgw.delivery.claim import Hold, Sightings, held_as
from svcgw.delivery.queue import DeliveryQueue
from svcgw.intake.ingest import Ingest
from svcgw.registry.destinations import DestinationChange, DestinationConfig
from svcgw.registry.store import Scope, Store
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import Tenant, provision, with_store
from tests.svcgw.delivery.test_deadletters import ingest
from tests.svcgw.delivery.test_queue import status
from tests.worker.support import add_destination, claim_batch, destination_delivery, with_queue
from tests.worker.test_concurrencycaps import Clock


def _default_callback(settings: Settings, account: str, url: str) -> None:
    async def action(store: Store) -> None:
        await store.set_callback(Scope(account=account), url)

    with_store(settings, action)


def test_a_claim_reads_the_account_default_of_the_jobs_own_account_whatever_it_remembered(
    settings: Settings, redis: Redis
) -> None:
    # The read names the account's callback hash from what the queue remembers of the instance;
    # the job's own fields decide, so a wrong memory costs a second read, never another's address.
    tenant, other = provision(settings), provision(settings)
    _default_callback(settings, tenant.account, "http://127.0.0.1:8081/own")
    _default_callback(settings, other.account, "http://127.0.0.1:8082/other")
    delivery_id = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"m1"}]}')

    async def misremembering(queue: DeliveryQueue) -> tuple[list[Any], dict[str, str]]:
        queue._claimer._accounts[tenant.appid] = other.account
        return await queue.claim_batch(10, "engine"), dict(queue._claimer._accounts)

    (claimed,), remembered = with_queue(settings, misremembering)
    assert claimed.delivery_id == delivery_id
    assert claimed.own == {} and claimed.default["url"] == "http://127.0.0.1:8081/own"
    assert remembered[tenant.appid] == tenant.account
    assert status(redis, delivery_id) == "started"


def test_a_job_is_deferred_for_its_own_account_being_busy_not_for_a_misremembered_one(
    settings: Settings, redis: Redis
) -> None:
    # A job named for a busy account is read no further than its owner: when that owner is
    # another account, it is named again and started, not deferred for someone else's load.
    tenant, busy = provision(settings), provision(settings)
    _default_callback(settings, tenant.account, "http://127.0.0.1:8081/own")
    delivery_id = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"b1"}]}')
    later = time.time() + 30

    async def misremembering(queue: DeliveryQueue, remembered: str, busy_account: str) -> list[Any]:
        queue._claimer._accounts[tenant.appid] = remembered
        return await queue.claim_batch(10, "engine", {}, {busy_account: later})

    (claimed,) = with_queue(settings, lambda queue: misremembering(queue, busy.account, busy.account))
    assert claimed.delivery_id == delivery_id and claimed.default["url"] == "http://127.0.0.1:8081/own"
    assert claimed.fields["body"] and status(redis, delivery_id) == "started"

    # Its own account busy, remembered as another: deferred all the same.
    again = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"b2"}]}')
    assert with_queue(settings, lambda queue: misremembering(queue, busy.account, tenant.account)) == []
    assert redis.zscore(keys.rq.scheduled(settings.queue_name), again) == pytest.approx(later)
    assert status(redis, again) == "scheduled"


def test_a_job_whose_lease_went_before_its_read_is_not_started(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings, url="http://127.0.0.1:8081/hook")
    delivery_id = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"m1"}]}')

    async def outrun(queue: DeliveryQueue) -> list[Any]:
        owners = queue._claimer._owners

        async def lease_lost(ids: Any) -> Any:
            # Between the two scripts, the lease ran out and another worker took the job.
            await queue.redis.zrem(queue.inflight_key, *ids)
            return await owners(ids)

        queue._claimer._owners = lease_lost  # type: ignore[method-assign]
        return await queue.claim_batch(10, "engine")

    assert with_queue(settings, outrun) == []
    assert status(redis, delivery_id) == "queued"  # not marked started by a worker that does not hold it


# --- the pop holds back the jobs of instances seen with no free slot --------------------
async def _post(queue: DeliveryQueue, settings: Settings, tenant: Tenant, event_id: str) -> str:
    """One post to ``tenant`` through the receiver's own code, from inside a queue's action."""
    body = b'{"event_type":"Msg","events":[{"id":"%s"}]}' % event_id.encode()
    result = await Ingest(queue.redis, keys, settings).accept(tenant.appid, tenant.receiver_token, body)
    assert result.delivery_id is not None
    return result.delivery_id


def _in_queue(settings: Settings, redis: Redis, delivery_id: str) -> bool:
    return delivery_id.encode() in redis.lrange(keys.rq.queue(settings.queue_name), 0, -1)


def test_the_jobs_of_an_instance_seen_with_a_busy_account_are_held_back_unread_at_the_pop(
    settings: Settings, redis: Redis
) -> None:
    tenant = provision(settings, url="http://127.0.0.1:8081/hook", appid="we-with-dashes-1")
    other = provision(settings, url="http://127.0.0.1:8082/hook")
    first = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"p1"}]}')
    later = time.time() + 30

    async def go(queue: DeliveryQueue) -> tuple[list[str], int, list[str], str]:
        (started,) = await queue.claim_batch(10, "engine")  # the read shows the instance's account
        assert started.delivery_id == first
        held = [await _post(queue, settings, tenant, f"p{n}") for n in range(2, 5)]
        mine = await _post(queue, settings, other, "o1")
        claimed = await queue.claim_batch(10, "engine", {}, {tenant.account: later})
        return held, queue.popped, [c.delivery_id for c in claimed], mine

    held, popped, claimed, mine = with_queue(settings, go)
    assert popped == 4 and claimed == [mine]
    scheduled = keys.rq.scheduled(settings.queue_name)
    for delivery_id in held:
        assert redis.zscore(scheduled, delivery_id) == pytest.approx(later)
        assert redis.zscore(keys.inflight(settings.queue_name), delivery_id) is None
        # Unread and untouched: the read would have set its status to scheduled.
        assert status(redis, delivery_id) == "queued"


def test_the_jobs_of_an_instance_seen_going_to_a_saturated_destination_are_held_back_at_the_pop(
    settings: Settings, redis: Redis
) -> None:
    tenant = provision(settings, url="http://Example.TEST:8081/hook")
    ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"d1"}]}')
    later = time.time() + 30

    async def go(queue: DeliveryQueue) -> tuple[int, int, str]:
        await queue.claim_batch(10, "engine")
        second = await _post(queue, settings, tenant, "d2")
        # Another destination saturated holds nothing back; this one's does, by its netloc.
        elsewhere = await queue.claim_batch(10, "engine", {"example.test:9999": later}, {})
        assert [c.delivery_id for c in elsewhere] == [second]
        third = await _post(queue, settings, tenant, "d3")
        held = await queue.claim_batch(10, "engine", {"example.test:8081": later}, {})
        return len(held), queue.popped, third

    held, popped, second = with_queue(settings, go)
    assert (held, popped) == (0, 1)
    assert redis.zscore(keys.rq.scheduled(settings.queue_name), second) == pytest.approx(later)
    assert status(redis, second) == "queued"


def test_a_destination_saturated_for_one_account_holds_back_that_accounts_jobs_only(
    settings: Settings, redis: Redis
) -> None:
    # Two accounts' endpoints on one host: the one's slots or probing there are its own.
    slow = provision(settings, url="http://hooks.test:8081/slow-path")
    victim = provision(settings, url="http://hooks.test:8081/own-path")
    ingest(settings, slow, b'{"event_type":"Msg","events":[{"id":"m1"}]}')
    ingest(settings, victim, b'{"event_type":"Msg","events":[{"id":"v1"}]}')
    later = time.time() + 30
    hold = {held_as(slow.account, "hooks.test:8081"): Hold(later)}

    async def go(queue: DeliveryQueue) -> tuple[list[str], list[str], list[str]]:
        # The first claim reads both, and holds back the slow account's job at the read.
        first = [c.delivery_id for c in await queue.claim_batch(10, "engine", hold, {})]
        mine = [await _post(queue, settings, slow, f"m{n}") for n in range(2, 4)]
        theirs = [await _post(queue, settings, victim, f"v{n}") for n in range(2, 4)]
        # Now both instances were seen: the slow account's are held back at the pop, the other's go.
        second = [c.delivery_id for c in await queue.claim_batch(10, "engine", hold, {})]
        assert sorted(second) == sorted(theirs)
        return first, mine, theirs

    first, mine, theirs = with_queue(settings, go)
    assert len(first) == 1 and first[0].startswith(victim.appid)
    scheduled = keys.rq.scheduled(settings.queue_name)
    for delivery_id in mine:
        assert redis.zscore(scheduled, delivery_id) == pytest.approx(later)
        assert status(redis, delivery_id) == "queued"
    assert all(redis.zscore(scheduled, d) is None for d in theirs)


def test_an_instance_not_seen_lately_is_read_before_its_jobs_are_held_back(settings: Settings, redis: Redis) -> None:
    # What a read showed lapses: the next job is read again (and held back by the read, which
    # sets its status), then the ones after it are held back at the pop.
    tenant = provision(settings, url="http://127.0.0.1:8081/hook")
    ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"s1"}]}')
    later = time.time() + 30
    busy = {tenant.account: later}

    async def go(queue: DeliveryQueue) -> list[str]:
        await queue.claim_batch(10, "engine")
        sightings = queue._claimer.sightings
        sightings.clock = lambda: time.monotonic() + sightings.fresh + 1
        ids = [await _post(queue, settings, tenant, "s2")]
        assert await queue.claim_batch(10, "engine", {}, busy) == []
        ids.append(await _post(queue, settings, tenant, "s3"))
        assert await queue.claim_batch(10, "engine", {}, busy) == []
        return ids

    read, popped = with_queue(settings, go)
    assert status(redis, read) == "scheduled" and status(redis, popped) == "queued"
    assert not _in_queue(settings, redis, read) and not _in_queue(settings, redis, popped)


def test_a_job_held_back_at_the_pop_is_claimed_and_started_once_due(settings: Settings, redis: Redis) -> None:
    # Its status said queued while it waited; promotion leaves that be, and the claim starts it.
    tenant = provision(settings, url="http://127.0.0.1:8081/hook")
    ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"w1"}]}')
    soon = time.time() + 0.05

    async def go(queue: DeliveryQueue) -> tuple[str, list[str]]:
        await queue.claim_batch(10, "engine")
        held = await _post(queue, settings, tenant, "w2")
        assert await queue.claim_batch(10, "engine", {}, {tenant.account: soon}) == []
        deadline = time.monotonic() + 5
        while (await queue.promote_due()).moved == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return held, [c.delivery_id for c in await queue.claim_batch(10, "engine")]

    held, claimed = with_queue(settings, go)
    assert claimed == [held] and status(redis, held) == "started"


# --- Sightings ----------------------------------------------------------------------------
def test_sightings_name_the_instances_of_busy_accounts_and_saturated_destinations_seen_lately() -> None:
    clock = Clock()
    seen = Sightings(5.0, clock=clock)
    seen.saw("a1", "acct", "one.test")
    seen.saw("a2", "acct", "two.test")
    seen.saw("b1", "other", "one.test")
    assert seen.held_back({}, {}) == {}
    assert seen.held_back({}, {"acct": 7.0}) == {"a1": Hold(7.0), "a2": Hold(7.0)}
    # The later of the two dues, where an instance's account is busy and its destination full.
    assert seen.held_back({"one.test": Hold(9.0)}, {"acct": 7.0}) == {"a1": Hold(9.0), "a2": Hold(7.0), "b1": Hold(9.0)}
    # A line counts by its end: a destination being probed parks its jobs over a minute.
    parked = Hold(6.0, 60.0, "svcgw:parked:http://one.test:80")
    assert seen.held_back({"one.test": parked}, {"acct": 7.0})["a1"] == parked
    clock.now += 5.5
    seen.saw("a2", "acct", "two.test")
    assert seen.held_back({"one.test": Hold(9.0)}, {"acct": 7.0}) == {"a2": Hold(7.0)}


def test_a_sighting_follows_an_instance_to_its_new_address_and_an_owner_only_read_keeps_it() -> None:
    seen = Sightings(5.0, clock=Clock())
    seen.saw("a1", "acct", "old.test")
    seen.saw("a1", "acct", "")  # the read of a busy account's job reads its owner only
    assert seen.held_back({"old.test": Hold(3.0)}, {}) == {"a1": Hold(3.0)}
    seen.saw("a1", "acct", "new.test")
    assert seen.held_back({"old.test": Hold(3.0)}, {}) == {}
    assert seen.held_back({"new.test": Hold(4.0)}, {}) == {"a1": Hold(4.0)}


def test_sightings_forget_instances_not_seen_lately() -> None:
    clock = Clock()
    seen = Sightings(1.0, clock=clock)
    for n in range(50):
        seen.saw(f"a{n}", "acct", "one.test")
    clock.now += 10
    seen.saw("fresh", "acct", "one.test")
    assert list(seen._seen) == ["fresh"]
    assert seen._by == {"a:acct": {"fresh"}, "d:one.test": {"fresh"}, "d:acct one.test": {"fresh"}}


# --- jobs parked for a destination being probed (svcgw.delivery.breaker) --------------------
def test_jobs_held_back_for_a_hanging_destination_are_lined_up_parked_and_brought_forward_unattempted(
    settings: Settings, redis: Redis
) -> None:
    url = "http://127.0.0.1:8081/hook"
    destination = "http://127.0.0.1:8081"
    tenant = provision(settings, url=url)
    ids = [ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"p%d"}]}' % n) for n in range(40)]
    scheduled = keys.rq.scheduled(settings.queue_name)
    now = time.time()
    line = Hold(now + 5, 60.0, keys.parked(destination))

    async def go(queue: DeliveryQueue) -> tuple[list[str], list[str]]:
        # The first claim reads one job and hands it back (the read); the next ones hold the
        # instance's jobs back at the pop, unread, lined up over the minute after five seconds.
        first = await queue.claim_batch(1, "engine", {"127.0.0.1:8081": line})
        rest = await queue.claim_batch(100, "engine", {"127.0.0.1:8081": line})
        return [c.delivery_id for c in first], [c.delivery_id for c in rest]

    assert with_queue(settings, go) == ([], [])
    dues = dict(redis.zrange(scheduled, 0, -1, withscores=True))
    assert set(dues) == {d.encode() for d in ids}
    assert all(now + 5 <= due <= now + 66 and due == int(due) for due in dues.values())  # whole seconds
    assert max(dues.values()) - min(dues.values()) > 30  # spread over the line, not bunched
    assert dict(redis.zrange(keys.parked(destination), 0, -1, withscores=True)) == dues
    assert 0 < redis.ttl(keys.parked(destination)) <= 2 * 60
    assert all(status(redis, d) in ("queued", "scheduled") for d in ids)

    # One was attempted and scheduled for its retry meanwhile: it keeps its schedule.
    retrying = ids[0]
    redis.zadd(scheduled, {retrying: now + 600})
    moved = with_queue(settings, lambda queue: queue.unpark(destination))
    assert moved == (len(ids) - 1, 0)
    after = dict(redis.zrange(scheduled, 0, -1, withscores=True))
    assert after[retrying.encode()] == pytest.approx(now + 600)
    assert all(after[d.encode()] <= time.time() for d in ids[1:])
    assert redis.exists(keys.parked(destination)) == 0
    # Nothing was attempted: no attempt count, no record.
    assert all(redis.hget(keys.delivery(d), "attempts") in (None, b"0") for d in ids)
    # Brought forward, they are promoted and claimed as any other job.
    promoted = with_queue(settings, lambda queue: queue.promote_due())
    assert promoted.moved == len(ids) - 1


# --- further destinations (docs/destinations.md): their hash and pace record, in place of the callback hashes ---
def _further(settings: Settings, redis: Redis, **values: object) -> tuple[Tenant, DestinationConfig, str, str]:
    """An instance with its own address, one further destination of its account, and one post to both."""
    tenant = provision(settings, url="http://127.0.0.1:8081/primary")
    destination = add_destination(
        settings, Scope(account=tenant.account), "http://127.0.0.1:8082/further", bearer_token="tok-further", **values
    )
    primary = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"f1"}]}')
    body = redis.hget(keys.rq.job(primary), "body")
    assert body
    further = destination_delivery(redis, settings, tenant, destination.id, primary, body)
    return tenant, destination, primary, further


def _changed(settings: Settings, destination_id: str, change: DestinationChange) -> None:
    async def action(store: Store) -> None:
        await store.update_destination(destination_id, change)

    with_store(settings, action)


def test_a_further_destinations_job_is_read_with_its_destinations_hash_the_primarys_as_before(
    settings: Settings, redis: Redis
) -> None:
    _, destination, primary, further = _further(settings, redis)
    claimed = {job.delivery_id: job for job in claim_batch(settings, 10)}
    assert set(claimed) == {primary, further}
    stored = {k.decode(): v.decode() for k, v in redis.hgetall(keys.destination(destination.id)).items()}
    job = claimed[further]
    assert job.destination_id == destination.id and job.fields["destination"] == destination.id.encode()
    # The destination's url, sealed secret and token under a callback hash's names; no account default.
    assert job.own == {"url": destination.url, "secret": stored["secret"], "token": stored["token"]}
    assert job.default == {}
    assert claimed[primary].destination_id == "" and claimed[primary].own["url"] == "http://127.0.0.1:8081/primary"
    assert status(redis, further) == "started" and status(redis, primary) == "started"
    assert not redis.exists(keys.destination_pace(destination.id))  # no rate: no pace record


def test_a_job_named_without_the_destination_its_fields_name_is_named_again(settings: Settings, redis: Redis) -> None:
    # The read names the destination's keys only when told of it: a job whose fields name one it
    # was not named for is named again, never sent to the instance's own address.
    _, destination, _, further = _further(settings, redis)

    async def unaware(queue: DeliveryQueue) -> list[Any]:
        owners = queue._claimer._owners

        async def without_destination(ids: Any) -> Any:
            return {i: (owner[0], owner[1], "") for i, owner in (await owners(ids)).items()}

        queue._claimer._owners = without_destination  # type: ignore[method-assign]
        return await queue.claim_batch(10, "engine")

    claimed = {job.delivery_id: job for job in with_queue(settings, unaware)}
    assert claimed[further].own["url"] == destination.url and claimed[further].destination_id == destination.id


def test_a_disabled_destinations_job_waits_unattempted_and_goes_once_enabled(settings: Settings, redis: Redis) -> None:
    _, destination, primary, further = _further(settings, redis)
    _changed(settings, destination.id, DestinationChange(enabled=False))
    before = time.time()
    (claimed,) = claim_batch(settings, 10)
    assert claimed.delivery_id == primary
    due = redis.zscore(keys.rq.scheduled(settings.queue_name), further)
    assert due is not None and before + 30 <= due <= time.time() + 30  # SVCGW_DISABLED_RECHECK_SECONDS
    assert status(redis, further) == "scheduled" and redis.zscore(keys.inflight(settings.queue_name), further) is None
    state = redis.hmget(keys.delivery(further), "state", "attempts", "failures")
    assert state == [b"queued", b"0", b"0"]  # pending, not an attempt

    _changed(settings, destination.id, DestinationChange(enabled=True))
    redis.zrem(keys.rq.scheduled(settings.queue_name), further)
    redis.rpush(keys.rq.queue(settings.queue_name), further)
    (again,) = claim_batch(settings, 10)
    assert again.delivery_id == further and again.own["url"] == destination.url


def test_a_removed_destinations_job_is_started_with_no_address(settings: Settings, redis: Redis) -> None:
    _, destination, _, further = _further(settings, redis)

    async def remove(store: Store) -> None:
        await store.remove_destination(destination.id)

    with_store(settings, remove)
    claimed = {job.delivery_id: job for job in claim_batch(settings, 10)}
    assert claimed[further].own == {} and claimed[further].destination_id == destination.id
    assert status(redis, further) == "started"


def test_a_backlog_over_the_rate_goes_back_lined_up_one_interval_apart(settings: Settings, redis: Redis) -> None:
    tenant, destination, primary, first = _further(settings, redis, rate=2)
    body = redis.hget(keys.delivery(first), "body")
    assert body
    ids = [first, *(destination_delivery(redis, settings, tenant, destination.id, primary, body) for _ in range(9))]
    claimed = [job.delivery_id for job in claim_batch(settings, 20)]
    # One second's worth at once beside the first (GCRA, interval 0.5 s): three of the ten; the primary.
    assert claimed == [primary, *ids[:3]]
    scheduled = dict(redis.zrange(keys.rq.scheduled(settings.queue_name), 0, -1, withscores=True))
    dues = [scheduled[i.encode()] for i in ids[3:]]
    assert all(b - a == pytest.approx(0.5, abs=1e-5) for a, b in itertools.pairwise(dues))
    for job in ids[3:]:
        assert status(redis, job) == "scheduled" and redis.hget(keys.delivery(job), "attempts") == b"0"
    # The script's arithmetic is pacing's: replayed from the claim's clock, the same dues and record.
    now = dues[0] - 0.5
    pace, expected = pacing.Pace(), []
    for _ in ids:
        due, pace = pacing.take(pace, 2.0, now)
        if due is not None:
            expected.append(due)
    assert dues == pytest.approx(expected, abs=1e-5)
    record = {k.decode(): float(v) for k, v in redis.hgetall(keys.destination_pace(destination.id)).items()}
    assert record == pytest.approx({"t": pace.tat, "h": pace.horizon}, abs=1e-5)
    assert 0 < redis.pttl(keys.destination_pace(destination.id)) <= (pacing.expires_at(pace) - time.time()) * 1000 + 50
