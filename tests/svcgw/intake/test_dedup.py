"""The de-duplication window: its bucket arithmetic, its plan, and dedup.lua on fakeredis and on Valkey."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from typing import Any

import fakeredis
import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from svcgw.config.settings import Settings
from svcgw.intake import dedup
from svcgw.intake.dedup import Plan
from svcgw.intake.envelope import parse_post
from svcgw.intake.ingest import Ingest
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.layoutversion import BUCKETS, HEXPIRE, Layout
from svcgw.storage.scripts import source
from tests.conftest import Tenant, provision
from tests.support import wait_for

DAY = 86400
APPID = "we_0123456789abcde"

# dedup.lua alone: one post's fields, each 1 when fresh, 0 when seen in the window; ARGV[3] is the
# clock of the buckets (the ingest script's is Redis's TIME, dedup_clock).
DRIVER = """
local w = dedup_window(ARGV[1], ARGV[2], KEYS, 1, tonumber(ARGV[3]))
local fresh = {}
for i = 4, #ARGV do fresh[#fresh + 1] = w.fresh(ARGV[i]) and 1 or 0 end
w.close()
return fresh
"""


def run_window(client: Redis, plan: Plan, fields: Sequence[bytes], now: float | None = None) -> list[int]:
    script = client.register_script(source("dedup") + "\n" + DRIVER)
    clock = int(time.time() if now is None else now)
    return [int(x) for x in script(keys=plan.keys, args=[plan.mode, plan.expiry, clock, *fields])]


def event(event_id: str) -> tuple[str, bytes]:
    """An event's key (layout 1's) and field (layout 2's), as the receiver makes them."""
    body = b'{"event_type":"Msg","events":[{"id":"%s"}]}' % event_id.encode()
    (parsed,) = parse_post(body, max_bytes=len(body)).events
    assert parsed.key is not None and parsed.digest is not None
    return parsed.key, parsed.digest


A, B, C = event("a"), event("b"), event("c")
UPGRADED_LONG_AGO = Layout(2, 0, BUCKETS)


# --- the arithmetic --------------------------------------------------------------


def test_the_window_is_the_log_retention_and_at_least_a_day() -> None:
    assert dedup.window(Settings(log_retention=3600)) == DAY
    assert dedup.window(Settings(log_retention=3 * DAY)) == 3 * DAY


@pytest.mark.parametrize("written", [0.0, 0.5, DAY - 0.001, DAY, 1795645968.25, 1795651200.0, 1795737599.999])
def test_an_id_in_a_bucket_is_found_until_at_least_a_window_later(written: float) -> None:
    def looked_at(now: float) -> set[int]:
        n = dedup.bucket(now, DAY)
        return {n, n - 1}

    n = dedup.bucket(written, DAY)
    until = dedup.found_until(written, DAY)
    assert written + DAY <= until <= written + 2 * DAY
    # The boundary: still a duplicate at written + window, and up to the bucket's expiry.
    assert n in looked_at(written + DAY)
    assert n in looked_at(until - 0.001)
    assert n not in looked_at(until)
    # The bucket lives exactly as long as it is looked at.
    assert dedup.bucket_expiry(n, DAY) == until


def test_the_plan_names_every_key_the_script_touches() -> None:
    now = 1795645968.5
    n = dedup.bucket(now, DAY)
    assert dedup.plan(keys, APPID, [A[0]], UPGRADED_LONG_AGO, now, DAY, hsetex=True) == Plan(
        [f"svcgw:dd:{{{APPID}}}:{n}", f"svcgw:dd:{{{APPID}}}:{n - 1}"], "buckets", DAY, n
    )
    # The bucket Redis's clock gave, named instead of the receiver's.
    assert dedup.plan(keys, APPID, [], UPGRADED_LONG_AGO, now, DAY, hsetex=True, current=n + 1).keys == [
        f"svcgw:dd:{{{APPID}}}:{n + 1}", f"svcgw:dd:{{{APPID}}}:{n}"
    ]
    hexpire = Layout(2, 0, HEXPIRE)
    planned = dedup.plan(keys, APPID, [A[0]], hexpire, now, DAY, hsetex=True)
    assert planned == Plan([f"svcgw:dd:{{{APPID}}}"], "hsetex", DAY)
    assert dedup.plan(keys, APPID, [A[0]], hexpire, now, DAY, hsetex=False).mode == "hexpire"


def test_layout_1_keys_are_named_until_since_plus_the_window() -> None:
    since = 1795645968
    upgraded = Layout(2, since, HEXPIRE)
    old = [keys.dedup(APPID, A[0]), keys.dedup(APPID, B[0])]
    assert dedup.plan(keys, APPID, [A[0], B[0]], upgraded, since, DAY, hsetex=True).keys[1:] == old
    assert dedup.plan(keys, APPID, [A[0], B[0]], upgraded, since + DAY - 0.001, DAY, hsetex=True).keys[1:] == old
    assert dedup.plan(keys, APPID, [A[0], B[0]], upgraded, since + DAY, DAY, hsetex=True).keys[1:] == []
    # A post without ids names none.
    assert dedup.plan(keys, APPID, [], upgraded, since, DAY, hsetex=True).keys[1:] == []


def test_the_field_is_16_bytes_of_the_ids_sha256() -> None:
    import hashlib

    assert A[1] == hashlib.sha256(b"a").digest()[:16]
    assert A[0] == "id:" + hashlib.sha256(b"a").hexdigest()[:40]


# --- dedup.lua ---------------------------------------------------------------------


@pytest.fixture
def fake() -> Iterator[fakeredis.FakeRedis]:
    client = fakeredis.FakeRedis(version=(8, 0))
    yield client
    client.close()


def test_buckets_refuse_a_repeat_within_the_window_and_take_it_after(fake: fakeredis.FakeRedis) -> None:
    t = time.time()

    def at(now: float, *fields: bytes) -> list[int]:
        return run_window(fake, dedup.plan(keys, APPID, [], UPGRADED_LONG_AGO, now, DAY, hsetex=False), fields, now)

    assert at(t, A[1], A[1], B[1]) == [1, 0, 1]  # a repeat within one post too
    n = dedup.bucket(t, DAY)
    assert fake.hgetall(keys.dedup_bucket(APPID, n)) == {A[1]: b"1", B[1]: b"1"}
    assert fake.expiretime(keys.dedup_bucket(APPID, n)) == dedup.bucket_expiry(n, DAY)
    assert at(t + DAY, A[1], C[1]) == [0, 1]  # the boundary: found in the previous bucket
    assert at(dedup.found_until(t, DAY), A[1]) == [1]
    # A repeat refused is not written again: its window is not stretched.
    assert not fake.hexists(keys.dedup_bucket(APPID, n + 1), A[1])


@pytest.mark.parametrize("mode", ["hexpire", "hsetex"])
def test_fields_that_expire_refuse_a_repeat_for_the_window(fake: fakeredis.FakeRedis, mode: str) -> None:
    plan = dedup.plan(keys, APPID, [], Layout(2, 0, HEXPIRE), time.time(), DAY, hsetex=mode == "hsetex")
    assert plan.mode == mode
    assert run_window(fake, plan, [A[1], A[1], B[1]]) == [1, 0, 1]
    assert run_window(fake, plan, [A[1], C[1]]) == [0, 1]
    container = keys.dedup_container(APPID)
    assert fake.hgetall(container) == {A[1]: b"1", B[1]: b"1", C[1]: b"1"}
    assert all(DAY - 5 <= ttl <= DAY for ttl in fake.httl(container, A[1], B[1], C[1]))
    assert DAY - 5 <= fake.ttl(container) <= DAY


def test_an_id_under_its_layout_1_key_is_a_duplicate_and_not_copied(fake: fakeredis.FakeRedis) -> None:
    now = time.time()
    fake.set(keys.dedup(APPID, A[0]), 1, nx=True, ex=DAY)  # as the ingest script of layout 1 wrote it
    upgrading = Layout(2, int(now), HEXPIRE)
    plan = dedup.plan(keys, APPID, [A[0], B[0]], upgrading, now, DAY, hsetex=True)
    assert run_window(fake, plan, [A[1], B[1]]) == [0, 1]
    assert fake.hkeys(keys.dedup_container(APPID)) == [B[1]]
    # A window after the marker's since, the old keys are no longer looked at.
    later = dedup.plan(keys, APPID, [A[0]], upgrading, now + DAY, DAY, hsetex=True)
    assert run_window(fake, later, [A[1]]) == [1]


def test_a_post_of_duplicates_only_sets_no_expiry(fake: fakeredis.FakeRedis) -> None:
    plan = dedup.plan(keys, APPID, [], UPGRADED_LONG_AGO, time.time(), DAY, hsetex=False)
    assert run_window(fake, plan, [A[1]]) == [1]
    fake.persist(plan.keys[0])
    assert run_window(fake, plan, [A[1]]) == [0]
    assert fake.ttl(plan.keys[0]) == -1


@pytest.mark.parametrize("mode", ["hexpire", "hsetex"])
def test_on_valkey_a_field_expires_after_the_window(valkey_url: str, mode: str) -> None:
    """The embedded default's server: real per-field expiry, with a one-second window."""
    client = Redis.from_url(valkey_url)
    try:
        plan = dedup.plan(keys, APPID, [], Layout(2, 0, HEXPIRE), time.time(), 1, hsetex=mode == "hsetex")
        started = time.monotonic()
        assert run_window(client, plan, [A[1], B[1]]) == [1, 1]
        assert run_window(client, plan, [A[1]]) == [0]
        wait_for(lambda: run_window(client, plan, [A[1]]) == [1], timeout=5, what="the field to expire")
        assert time.monotonic() - started >= 0.9
        # Both fields and then the key are gone with the window.
        wait_for(lambda: client.exists(plan.keys[0]) == 0 or None, timeout=5, what="the container to expire")
    finally:
        client.close()


# --- through the receiver's ingest, on both servers --------------------------------


@pytest.fixture(params=["redis 7.0: buckets", "valkey 9: hexpire"])
def deployment(request: pytest.FixtureRequest, env: dict[str, str]) -> tuple[Settings, str]:
    url = request.getfixturevalue("redis_url" if request.param.startswith("redis") else "valkey_url")
    return Settings.from_env(dict(env, SVCGW_REDIS_URL=url)), url


def ingest(settings: Settings, tenant: Tenant, *ids: str, skew: float = 0.0) -> tuple[int, int]:
    """One post of events with these ids by a receiver process just started: (accepted, duplicates).

    ``skew``: seconds the receiver's clock is ahead of the true time (behind, when negative).
    """
    body = b'{"event_type":"Msg","events":[%s]}' % b",".join(b'{"id":"%s"}' % i.encode() for i in ids)

    async def main() -> tuple[int, int]:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            receiver = Ingest(client, keys, settings, clock=lambda: time.time() + skew)
            result = await receiver.accept(tenant.appid, tenant.receiver_token, body)
        finally:
            await client.aclose()
        return result.accepted, result.duplicates

    return asyncio.run(main())


def test_a_repeat_within_the_window_is_refused_in_either_mode(deployment: tuple[Settings, str]) -> None:
    settings, url = deployment
    tenant = provision(settings)
    assert ingest(settings, tenant, "a", "a", "b") == (2, 1)
    assert ingest(settings, tenant, "b", "c") == (1, 1)
    with Redis.from_url(url) as client:
        mode = client.hget(keys.layout, "dedup")
        containers = client.keys(keys.dedup_container(tenant.appid) + "*")
        fields = {A[1], B[1], C[1]}
        if mode == b"hexpire":
            assert containers == [keys.dedup_container(tenant.appid).encode()]
            ttls = client.httl(containers[0], *fields)
            assert all(DAY - 5 <= ttl <= DAY for ttl in ttls)
        else:
            assert mode == b"buckets"
            assert containers == [keys.dedup_bucket(tenant.appid, dedup.bucket(time.time(), DAY)).encode()]
        assert set(client.hkeys(containers[0])) == fields
        assert client.keys("svcgw:dedup:*") == []  # layout 1's keys are no longer written


def test_an_upgrade_keeps_refusing_the_ids_seen_before_it_for_their_window(deployment: tuple[Settings, str]) -> None:
    settings, url = deployment
    tenant = provision(settings)
    with Redis.from_url(url) as client:
        # Seen by the receiver of layout 1 (ingest.lua's SET NX EX), just before the upgrade.
        client.set(keys.dedup(tenant.appid, A[0]), 1, nx=True, ex=dedup.window(settings))
        assert not client.exists(keys.layout)
        # The first receiver of layout 2 writes the marker: since = now.
        assert ingest(settings, tenant, "a", "b") == (1, 1)
        assert ingest(settings, tenant, "a") == (0, 1)
        assert A[1] not in {
            f for key in client.keys(keys.dedup_container(tenant.appid) + "*") for f in client.hkeys(key)
        }
        # A window after since, receivers stop looking: the key kept alive here would be ignored.
        since = int(time.time()) - dedup.window(settings)
        client.hset(keys.layout, "since", since)
        assert ingest(settings, tenant, "a") == (1, 0)
        assert ingest(settings, tenant, "a") == (0, 1)  # now under the new layout


def test_receivers_whose_clocks_disagree_with_redis_keep_one_window(deployment: tuple[Settings, str]) -> None:
    """The buckets' numbers and expiry both come from Redis's clock, whatever the receivers' clocks say.

    One receiver's clock is in the bucket before Redis's, another's in the bucket after: each names the
    bucket its clock gives, is told Redis's, and names that one. Every id is found by every receiver,
    and for at least the window after Redis stored it.
    """
    settings, url = deployment
    tenant = provision(settings)
    window = dedup.window(settings)
    with Redis.from_url(url) as client:
        seconds, _ = client.time()
        into = seconds % window
        behind, ahead = -(into + 60.0), window - into + 60.0  # the previous bucket's end, the next one's start
        assert ingest(settings, tenant, "a", skew=behind) == (1, 0)
        assert ingest(settings, tenant, "a") == (0, 1)
        assert ingest(settings, tenant, "a", "b", skew=ahead) == (1, 1)
        assert ingest(settings, tenant, "b", skew=behind) == (0, 1)
        if client.hget(keys.layout, "dedup") != b"buckets":
            return  # fields that expire by themselves: no clock of anyone's is read
        after, _ = client.time()
        (bucket,) = client.keys(keys.dedup_container(tenant.appid) + ":*")
        assert bucket.decode() in {keys.dedup_bucket(tenant.appid, n // window) for n in (seconds, after)}
        assert set(client.hkeys(bucket)) == {A[1], B[1]}
        # Found for at least a window from when Redis stored it, by Redis's clock.
        assert client.expiretime(bucket) >= after + window


def test_a_receiver_learns_redis_bucket_once(redis_url: str, env: dict[str, str]) -> None:
    """Its first post names its clock's bucket and is told Redis's; the posts after it name Redis's at once."""
    settings = Settings.from_env(dict(env, SVCGW_REDIS_URL=redis_url))
    tenant = provision(settings)
    window = dedup.window(settings)

    async def main() -> list[int]:
        client = AsyncRedis.from_url(redis_url)
        seconds, _ = await client.time()
        receiver = Ingest(client, keys, settings, clock=lambda: time.time() + window - seconds % window + 60)
        calls: list[int] = []
        script = receiver._run_script

        async def counted(**given: Any) -> Any:
            calls.append(1)
            return await script(**given)

        receiver._run_script = counted  # type: ignore[method-assign]
        per_post = []
        try:
            for n in range(3):
                body = b'{"event_type":"Msg","events":[{"id":"%d"}]}' % n
                before = len(calls)
                await receiver.accept(tenant.appid, tenant.receiver_token, body)
                per_post.append(len(calls) - before)
        finally:
            await receiver.aclose()
            await client.aclose()
        return per_post

    assert asyncio.run(main()) == [2, 1, 1]
