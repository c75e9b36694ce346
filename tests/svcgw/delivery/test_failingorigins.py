"""Failing destinations: the setting, the record the finish script keeps, the log records, the gauge."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import cast

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from receiver.metrics import render
from svcgw.config.settings import Settings, SettingsError
from svcgw.delivery import breaker, failingorigins
from svcgw.delivery.attempt import Attempt
from svcgw.delivery.failingorigins import FailingOrigin, is_failing, origin_of, parse
from svcgw.delivery.queue import Finish, Finished
from svcgw.storage.keys import PLAIN as keys
from svcgw.views.metrics import snapshot
from tests.conftest import Tenant, provision
from tests.scriptkeys import ScriptKeyWatch
from tests.support import LogCapture, Sink, wait_for
from tests.svcgw.delivery.test_deadletters import ingest
from tests.worker.support import claim, with_queue
from tests.worker.test_engine import Running


def test_the_setting_is_validated() -> None:
    assert Settings.from_env({}).failing_after == 900
    assert Settings.from_env({"SVCGW_FAILING_AFTER": "60"}).failing_after == 60
    for bad in ("0", "-5", "soon", "1.5"):
        with pytest.raises(SettingsError, match="SVCGW_FAILING_AFTER"):
            Settings.from_env({"SVCGW_FAILING_AFTER": bad})


def test_a_destination_is_the_origin_of_the_address() -> None:
    assert origin_of("https://Hooks.Example.com/a/b?c=d") == "https://hooks.example.com:443"
    assert origin_of("https://hooks.example.com:443/other") == "https://hooks.example.com:443"
    assert origin_of("http://[::1]:8080/x") == "http://[::1]:8080"
    assert origin_of("") == origin_of(None) == origin_of("not a url") == ""


def test_failing_means_only_failures_for_long_enough_and_lately() -> None:
    settings = Settings(failing_after=900, retry_schedule=(30.0, 600.0))
    now = 10_000.0
    record = FailingOrigin("d", first_failure=now - 901, last_failure=now - 10, flagged=False)
    assert is_failing(record, settings, now)
    assert not is_failing(FailingOrigin("d", now - 899, now - 1, False), settings, now)
    # Nothing tried it for longer than the threshold and the longest retry delay: forgotten.
    assert not is_failing(FailingOrigin("d", now - 5000, now - 1501, True), settings, now)
    assert parse("acc_1 d", b"1.5:2.5:1") == FailingOrigin("d", 1.5, 2.5, True, account="acc_1")
    assert parse("acc_1 d", "garbage") is None
    # An earlier version's record, named by its origin alone: not read.
    assert parse("https://down.example:443", b"1.5:2.5:1") is None


def test_a_record_is_named_by_its_account_and_destination() -> None:
    name = failingorigins.name("acc_1", "https://down.example:443")
    assert name == "acc_1 https://down.example:443"
    assert failingorigins.split(name) == ("acc_1", "https://down.example:443")
    assert failingorigins.name("", "https://down.example:443") == failingorigins.name("acc_1", "") == ""
    assert failingorigins.split("https://down.example:443") is None
    # Probing's records are named alike.
    assert breaker.name("acc_1", "https://down.example:443") == name


def _attempt(settings: Settings, appid: str, delivery_id: str, ok: bool, record: str, number: int) -> Finished:
    """One attempt's outcome stored through the engine's finish script."""
    assert claim(settings, 1) == [delivery_id]
    attempt = Attempt(ok=ok, at=time.time(), duration=0.01, status=200 if ok else 500, destination="x")
    kind = "delivered" if ok else "retry"
    item = Finish(delivery_id, appid, kind, attempt.record(number), due=time.time() - 1, retention=60, failing=record)
    (finished,) = with_queue(settings, lambda queue: queue.finish_detailed([item]))
    if not ok:
        redis = Redis.from_url(settings.redis_url or "")
        try:
            # Due at once: back to the queue for the next claim.
            redis.zrem(keys.rq.scheduled(settings.queue_name), delivery_id)
            redis.rpush(keys.rq.queue(settings.queue_name), delivery_id)
        finally:
            redis.close()
    return finished


def test_the_finish_script_reports_the_start_and_the_recovery_once(settings: Settings, redis: Redis) -> None:
    settings = Settings.from_env({"SVCGW_REDIS_URL": settings.redis_url or "", "SVCGW_FAILING_AFTER": "1"})
    tenant = provision(settings)
    delivery_id = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"f1"}]}')
    where = failingorigins.name(tenant.account, "https://down.example:443")
    seen = [_attempt(settings, tenant.appid, delivery_id, False, where, 1)]
    first = parse(where, redis.hget(keys.failing_origins, where) or b"")
    assert first is not None and not first.flagged
    redis.hset(keys.failing_origins, where, f"{first.first_failure - 2}:{first.last_failure}:0")
    seen += [_attempt(settings, tenant.appid, delivery_id, False, where, n) for n in (2, 3)]
    seen.append(_attempt(settings, tenant.appid, delivery_id, True, where, 4))
    assert [(f.held, f.started_failing, f.recovered) for f in seen] == [
        (True, False, False),
        (True, True, False),  # the first failure past the threshold: once
        (True, False, False),
        (True, False, True),  # the first success after it
    ]
    assert redis.hget(keys.failing_origins, where) is None  # a destination that answers is not kept


def test_one_finish_call_reads_a_destinations_record_once_and_sets_a_streams_expiry_once(
    settings: Settings, redis: Redis
) -> None:
    """A batch holds many attempts to the same destination and instance: the flags are those of one
    finish call per attempt, at one HGET of the destination's record and one EXPIRE of the stream."""
    settings = Settings.from_env({"SVCGW_REDIS_URL": settings.redis_url or "", "SVCGW_FAILING_AFTER": "1"})
    tenant = provision(settings)
    ids = [ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"b%d"}]}' % n) for n in range(4)]
    assert sorted(claim(settings, 4)) == sorted(ids)
    where = failingorigins.name(tenant.account, "https://down.example:443")
    now = time.time()
    redis.hset(keys.failing_origins, where, f"{now - 5}:{now - 1}:0")  # failing 5 s, not flagged yet

    def item(delivery_id: str, ok: bool) -> Finish:
        attempt = Attempt(ok=ok, at=time.time(), duration=0.01, status=200 if ok else 500, destination="x")
        return Finish(delivery_id, tenant.appid, "delivered" if ok else "retry", attempt.record(1),
                      due=time.time() + 60, retention=60, failing=where)  # fmt: skip

    items = [item(ids[0], False), item(ids[1], False), item(ids[2], True), item(ids[3], True)]
    with ScriptKeyWatch(settings.redis_url or "") as watch:
        finished = with_queue(settings, lambda queue: queue.finish_detailed(items))
    assert [(f.held, f.started_failing, f.recovered) for f in finished] == [
        (True, True, False),  # the first failure past the threshold: once
        (True, False, False),
        (True, False, True),  # the first success after it
        (True, False, False),  # nothing left to recover from
    ]
    assert redis.hget(keys.failing_origins, where) is None
    (call,) = [c for c in watch.calls() if c.name == "queue_finish"]
    failing, stream = keys.failing_origins.encode(), keys.outcomes(tenant.appid).encode()
    assert [c[0].upper() for c in call.inner if c[1:2] == [failing]] == [b"HGET", b"HSET", b"HSET", b"HDEL"]
    assert [c[0].upper() for c in call.inner if c[1:2] == [stream]] == [b"XADD", b"EXPIRE", b"XADD"]
    assert len(redis.xrange(stream)) == 2
    assert 0 < redis.ttl(stream) <= settings.log_retention


def test_a_failing_destination_is_logged_once_each_way_and_counted(env: dict[str, str], sink: Sink) -> None:
    settings = Settings.from_env(dict(env, SVCGW_FAILING_AFTER="1", SVCGW_RETRY_SCHEDULE=",".join(["0.2"] * 15)))
    tenant = provision(settings, url=sink.url)
    sink.set(status=503)
    capture = LogCapture()
    logger = logging.getLogger("svcgw.delivery")
    logger.addHandler(capture)
    previous = logger.level
    logger.setLevel(logging.INFO)
    try:
        # Two engines, as two workers: the records still come once.
        with Running(settings), Running(settings):
            for n in range(3):
                ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"x%d"}]}' % n)
            wait_for(lambda: "destination failing" in capture.output(), timeout=15, what="the failing record")
            assert gauge(settings) == 1
            time.sleep(0.6)  # more failed attempts meanwhile: no second record
            sink.set(status=200)
            ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"ok"}]}')
            wait_for(lambda: "destination recovered" in capture.output(), timeout=15, what="the recovery record")
            assert gauge(settings) == 0
    finally:
        logger.removeHandler(capture)
        logger.setLevel(previous)
    lines = capture.output().splitlines()
    assert sum("destination failing" in line for line in lines) == 1
    assert sum("destination recovered" in line for line in lines) == 1


def gauge(settings: Settings) -> int:
    async def read() -> int:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            data = await snapshot(client, keys, settings.queue_name, settings)
        finally:
            await client.aclose()
        text = render(data).decode()
        line = next(line for line in text.splitlines() if line.startswith("svcgw_failing_destinations "))
        assert int(float(line.split()[1])) == data["failing_destinations"]
        return int(data["failing_destinations"])

    return asyncio.run(read())


def test_failing_reads_an_accounts_named_destinations_or_every_record(settings: Settings, redis: Redis) -> None:
    now = time.time()
    redis.hset(
        keys.failing_origins,
        mapping={
            "acc_a https://a.example:443": f"{now - 2000}:{now - 5}:1",
            "acc_a https://b.example:443": f"{now - 10}:{now - 5}:0",  # not long enough yet
            "acc_b https://b.example:443": f"{now - 2000}:{now - 5}:1",
            "https://a.example:443": f"{now - 2000}:{now - 5}:1",  # an earlier version's, per origin alone
        },
    )

    async def read(names: list[str] | None, account: str | None = None) -> list[str]:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            return sorted(await failingorigins.failing(client, keys, settings, names, account=account))
        finally:
            await client.aclose()

    assert asyncio.run(read(None)) == ["acc_a https://a.example:443", "acc_b https://b.example:443"]
    assert asyncio.run(read(["https://a.example:443", "https://b.example:443", ""], "acc_a")) == [
        "https://a.example:443"
    ]
    # Another account's failures at the same origin are not this account's.
    assert asyncio.run(read(["https://b.example:443"], "acc_a")) == []
    assert asyncio.run(read(["https://a.example:443"], "acc_b")) == []
    assert asyncio.run(read(["https://b.example:443"], "acc_b")) == ["https://b.example:443"]
    # Records are kept per account: destinations are read only as some account's.
    with pytest.raises(ValueError, match="per account"):
        asyncio.run(read(["https://a.example:443"]))
    with pytest.raises(ValueError, match="by its destinations"):
        asyncio.run(read(None, "acc_a"))
    assert gauge(settings) == 2  # per account and destination; the earlier version's record counts for nothing


def test_records_of_no_origin_are_read_without_a_call() -> None:
    # Failing and probing records are read by one reader: asked of no origin, it asks Redis nothing
    # (a stand-in with no commands at all would fail if it did).
    no_redis = cast(AsyncRedis, object())
    for hash_key, reader in ((keys.failing_origins, failingorigins.parse), (keys.breakers, breaker.parse)):
        assert asyncio.run(failingorigins.read_records(no_redis, hash_key, ["", ""], "acc_a", reader)) == {}
        assert asyncio.run(failingorigins.read_records(no_redis, hash_key, ["https://a.example:443"], "", reader)) == {}


def test_the_finish_script_keeps_each_accounts_record_of_a_shared_origin_apart(
    settings: Settings, redis: Redis
) -> None:
    """Two accounts' endpoints on one host: one's failures flag only its own record, the other's successes
    end nothing of it, and a record of an earlier version (the origin alone) is neither read nor written."""
    settings = Settings.from_env({"SVCGW_REDIS_URL": settings.redis_url or "", "SVCGW_FAILING_AFTER": "1"})
    failing, answering = provision(settings), provision(settings)
    origin = "https://shared.example:443"
    mine = failingorigins.name(failing.account, origin)
    theirs = failingorigins.name(answering.account, origin)
    ids = {
        tenant.appid: ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"s1"}]}')
        for tenant in (failing, answering)
    }
    assert sorted(claim(settings, 2)) == sorted(ids.values())
    now = time.time()
    redis.hset(keys.failing_origins, mapping={mine: f"{now - 5}:{now - 1}:0", origin: f"{now - 5}:{now - 1}:1"})

    def item(tenant: Tenant, ok: bool, name: str) -> Finish:
        attempt = Attempt(ok=ok, at=time.time(), duration=0.01, status=200 if ok else 500, destination="x")
        return Finish(ids[tenant.appid], tenant.appid, "delivered" if ok else "retry", attempt.record(1),
                      due=time.time() + 60, retention=60, failing=name)  # fmt: skip

    with ScriptKeyWatch(settings.redis_url or "") as watch:
        items = [item(failing, False, mine), item(answering, True, theirs)]
        finished = with_queue(settings, lambda queue: queue.finish_detailed(items))
    assert [(f.held, f.started_failing, f.recovered) for f in finished] == [
        (True, True, False),  # its own record, past the threshold
        (True, False, False),  # the other account had no failure there: nothing to recover from
    ]
    record = parse(mine, redis.hget(keys.failing_origins, mine) or b"")
    assert record is not None and record.flagged and record.account == failing.account
    assert record.destination == origin
    assert redis.hget(keys.failing_origins, theirs) is None
    assert redis.hget(keys.failing_origins, origin) == f"{now - 5}:{now - 1}:1".encode()  # untouched
    (call,) = [c for c in watch.calls() if c.name == "queue_finish"]
    fields = [c[2] for c in call.inner if c[1:2] == [keys.failing_origins.encode()]]
    assert fields == [mine.encode(), mine.encode(), theirs.encode()]  # HGET, HSET of one; HGET of the other
