"""Dead letters: the failed registry is the truth, the index only a hint, and accounts stay apart."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from svcgw.config.settings import Settings
from svcgw.delivery import deadletters
from svcgw.delivery.attempt import Attempt
from svcgw.delivery.deadletters import DeadLetter, DeadLetterDetail, ReplayResult
from svcgw.delivery.queue import Finish
from svcgw.errors import NotFound
from svcgw.intake.ingest import Ingest
from svcgw.shards.clients import ShardRedis
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.rqformat import exc_info_field, failed_score
from tests.conftest import Tenant, provision
from tests.svcgw.delivery.fanout import fan_out, kill_among
from tests.worker.support import claim, finish

T = TypeVar("T")


def ingest(settings: Settings, tenant: Tenant, body: bytes) -> str:
    async def run() -> str | None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            result = await Ingest(client, keys, settings).accept(tenant.appid, tenant.receiver_token, body)
        finally:
            await client.aclose()
        return result.delivery_id

    delivery_id = asyncio.run(run())
    assert delivery_id is not None
    return delivery_id


def kill(settings: Settings, tenant: Tenant, event_id: str, *, died_at: float) -> str:
    """One delivery made a dead letter through the queue's own scripts, as the engine would."""
    body = b'{"event_type":"Msg","events":[{"id":"' + event_id.encode() + b'"}]}'
    delivery_id = ingest(settings, tenant, body)
    assert claim(settings, 1) == [delivery_id]
    attempt = Attempt(ok=False, at=died_at, duration=0.01, status=500, error="HTTP 500", destination="x")
    assert finish(
        settings,
        Finish(
            delivery_id,
            tenant.appid,
            "dead",
            attempt.record(1),
            due=failed_score(died_at, settings.dead_letter_retention),
            retention=settings.dead_letter_retention,
            error=exc_info_field("HTTP 500"),
        ),
    )
    return delivery_id


def _run(settings: Settings, read: Callable[..., Awaitable[T]], *args: Any, decode: bool = False, **kwargs: Any) -> T:
    """``read(client, settings, ...)`` in an event loop of its own, as one CLI command runs it."""

    async def run() -> T:
        client = AsyncRedis.from_url(settings.redis_url or "", decode_responses=decode)
        try:
            return await read([ShardRedis(client, keys)], settings, *args, **kwargs)
        finally:
            await client.aclose()

    return asyncio.run(run())


def list_dead(settings: Settings, **kwargs: Any) -> list[DeadLetter]:
    return _run(settings, deadletters.list_dead, **kwargs)


def count_dead(settings: Settings, **kwargs: Any) -> int:
    return _run(settings, deadletters.count_dead, **kwargs)


def show(settings: Settings, delivery_id: str, **kwargs: Any) -> DeadLetterDetail:
    return _run(settings, deadletters.show, delivery_id, **kwargs)


def replay(settings: Settings, **kwargs: Any) -> list[ReplayResult]:
    return _run(settings, deadletters.replay, **kwargs)


def test_listed_newest_first_with_attempts_and_last_error(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    now = time.time()
    older = kill(settings, tenant, "e1", died_at=now - 60)
    newer = kill(settings, tenant, "e2", died_at=now)

    letters = list_dead(settings)
    assert [d.id for d in list_dead(settings, decode=True)] == [newer, older]  # either decoding mode
    assert [d.id for d in letters] == [newer, older]
    assert [d.id for d in list_dead(settings, appid=tenant.appid)] == [newer, older]
    assert [d.id for d in list_dead(settings, account=tenant.account, offset=1)] == [older]
    assert [d.id for d in list_dead(settings, limit=1)] == [newer]
    first = letters[0]
    assert (first.appid, first.account, first.event_type) == (tenant.appid, tenant.account, "Msg")
    assert first.attempts == 1 and first.last_error == "HTTP 500"
    assert first.dead_at is not None and first.received_at is not None

    detail = show(settings, newer)
    assert orjson.loads(detail.body)["events"] == [{"id": "e2"}]
    assert [a["status"] for a in detail.attempts] == [500]
    assert detail.as_dict()["attempts"] == detail.attempts


def test_other_accounts_are_refused_like_unknown_ids(settings: Settings, redis: Redis) -> None:
    mine, theirs = provision(settings), provision(settings)
    own = kill(settings, mine, "m", died_at=time.time())
    foreign = kill(settings, theirs, "t", died_at=time.time())

    assert [d.id for d in list_dead(settings, account=mine.account)] == [own]
    assert list_dead(settings, appid=theirs.appid, account=mine.account) == []
    assert count_dead(settings, account=mine.account) == 1

    with pytest.raises(NotFound) as foreign_error:
        show(settings, foreign, account=mine.account)
    with pytest.raises(NotFound) as unknown_error:
        show(settings, "dlv_nothing", account=mine.account)
    assert str(foreign_error.value) == str(unknown_error.value).replace("dlv_nothing", foreign)
    assert foreign_error.value.what == unknown_error.value.what == "dead letter"

    results = replay(settings, ids=[foreign, "dlv_nothing"], account=mine.account)
    assert [r.as_dict() for r in results] == [
        {"id": foreign, "appid": None, "status": "not_found"},
        {"id": "dlv_nothing", "appid": None, "status": "not_found"},
    ]
    assert replay(settings, appid=theirs.appid, account=mine.account) == []
    assert [r.id for r in replay(settings, all=True, account=mine.account)] == [own]
    # The other account's dead letter is untouched.
    assert show(settings, foreign).id == foreign


def test_stale_index_ids_are_filtered(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    live = kill(settings, tenant, "live", died_at=time.time())
    requeued = kill(settings, tenant, "requeued", died_at=time.time())
    expired = kill(settings, tenant, "expired", died_at=time.time())
    index = keys.dead_letters_by_appid(tenant.appid)
    failed = keys.rq.failed(settings.queue_name)
    redis.sadd(index, "dlv_never_existed")
    redis.zrem(failed, requeued)  # what `rq requeue` does: the index is not told
    redis.zadd(failed, {expired: time.time() - 1})  # past its expiry, not yet cleaned

    assert [d.id for d in list_dead(settings, appid=tenant.appid)] == [live]
    assert [d.id for d in list_dead(settings)] == [live]
    assert count_dead(settings, appid=tenant.appid) == 1
    for gone in (requeued, expired, "dlv_never_existed"):
        with pytest.raises(NotFound):
            show(settings, gone)
    assert [(r.id, r.status) for r in replay(settings, appid=tenant.appid)] == [(live, "replayed")]


def test_replay_queues_one_fresh_attempt(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    delivery_id = kill(settings, tenant, "r", died_at=time.time())

    (result,) = replay(settings, ids=[delivery_id])
    assert result.as_dict() == {"id": delivery_id, "appid": tenant.appid, "status": "replayed"}
    record = redis.hgetall(keys.delivery(delivery_id))
    assert record[b"state"] == b"queued"
    assert int(record[b"failures"]) == len(settings.retry_schedule)
    assert redis.lrange(keys.rq.queue(settings.queue_name), 0, -1) == [delivery_id.encode()]
    assert not redis.sismember(keys.dead_letters_by_appid(tenant.appid), delivery_id)
    assert list_dead(settings) == []
    # Not a dead letter any more: a second replay finds nothing.
    assert [r.status for r in replay(settings, ids=[delivery_id])] == ["not_found"]


def test_replay_of_expired_data_reports_it(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    delivery_id = kill(settings, tenant, "x", died_at=time.time())
    redis.delete(keys.rq.job(delivery_id))

    assert [r.status for r in replay(settings, all=True)] == ["expired"]
    assert redis.zscore(keys.rq.failed(settings.queue_name), delivery_id) is None
    assert not redis.sismember(keys.dead_letters_by_appid(tenant.appid), delivery_id)


def test_replay_needs_exactly_one_selector(settings: Settings, redis: Redis) -> None:
    with pytest.raises(ValueError):
        replay(settings)
    with pytest.raises(ValueError):
        replay(settings, ids=["a"], all=True)


def test_replay_since_takes_only_what_died_in_that_stretch(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    stranger = provision(settings)
    now = time.time()
    old = kill(settings, tenant, "s1", died_at=now)
    recent = kill(settings, tenant, "s2", died_at=now)
    elsewhere = kill(settings, stranger, "s3", died_at=now)
    redis.hset(keys.delivery(old), "dead_at", repr(now - 3 * 3600))  # died three hours ago

    # An instance's, since two hours ago: only the recent one; a named older one says why not.
    assert [r.id for r in replay(settings, appid=tenant.appid, since=now - 7200)] == [recent]
    assert replay(settings, ids=[old], since=now - 7200) == [ReplayResult(old, tenant.appid, "died_earlier")]
    assert count_dead(settings, appid=tenant.appid) == 1

    # Alone, with an account: that account's instances only.
    assert replay(settings, account=tenant.account, since=now - 4 * 3600) == [
        ReplayResult(old, tenant.appid, "replayed")
    ]
    # Alone, without one (the operator): every instance.
    assert [r.id for r in replay(settings, since=now - 60)] == [elsewhere]
    with pytest.raises(ValueError):
        replay(settings, appid=tenant.appid, all=True, since=now)


def test_a_destination_deliverys_dead_letter_names_its_destination(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    plain = kill(settings, tenant, "p1", died_at=time.time() - 10)
    primary = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"f1"}]}')
    to_a, to_b = fan_out(settings, primary, ["dst_aaaa", "dst_bbbb"])
    kill_among(settings, to_b, tenant.appid, 3)

    letters = list_dead(settings, account=tenant.account)
    assert [(d.id, d.destination) for d in letters] == [(to_b, "dst_bbbb"), (plain, None)]
    assert letters[0].as_dict()["destination"] == "dst_bbbb" and letters[1].as_dict()["destination"] is None
    detail = show(settings, to_b)
    assert detail.destination == "dst_bbbb" and detail.as_dict()["destination"] == "dst_bbbb"
    assert orjson.loads(detail.body)["events"] == [{"id": "f1"}] and show(settings, plain).destination is None

    for scope in ({"account": tenant.account}, {"appid": tenant.appid}, {}):
        assert [d.id for d in list_dead(settings, destination="dst_bbbb", **scope)] == [to_b]
        assert [d.id for d in list_dead(settings, destination="primary", **scope)] == [plain]
        assert list_dead(settings, destination="dst_aaaa", **scope) == []
        assert count_dead(settings, destination="dst_bbbb", **scope) == 1
    assert list_dead(settings, destination="dst_bbbb", account=provision(settings).account) == []
    assert list_dead(settings, destination="dst_bbbb", offset=1) == []
    assert [r.as_dict() for r in replay(settings, ids=[to_b])] == [
        {"id": to_b, "appid": tenant.appid, "status": "replayed"}
    ]
    assert count_dead(settings, destination="dst_bbbb") == 0 and to_a != to_b
