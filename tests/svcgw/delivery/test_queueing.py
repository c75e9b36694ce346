"""Deliveries queued by their one writer, and service events' seq and order.

That RQ reads them as its own jobs is tests/svcgw/storage/test_rqformat.py's.
"""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from rq.job import Job
from rq.serializers import JSONSerializer

from svcgw import deliveryid
from svcgw.config.settings import Settings
from svcgw.delivery.queueing import queue_delivery, seq_pieces
from svcgw.deliveryid import new_delivery_id
from svcgw.intake.envelope import build_envelope
from svcgw.intake.ingest import Ingest
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.rqformat import FUNC_NAME
from tests.conftest import provision
from tests.support import service_chain


# --- the one writer ---------------------------------------------------------------------
def _written(redis: Redis, settings: Settings, appid: str, delivery_id: str) -> dict[str, Any]:
    """Everything a delivery wrote, without what differs from one write to the next."""
    record = redis.hgetall(keys.delivery(delivery_id))
    record.pop(b"received_at")
    job = {k: v for k, v in redis.hgetall(keys.rq.job(delivery_id)).items() if v != b""}
    for varying in (b"created_at", b"enqueued_at"):
        job.pop(varying)
    (entry,) = redis.xrange(keys.callback_log(appid))
    fields = entry[1]
    fields.pop(b"received_at")
    return {
        "record": record,
        "job": job,
        "queued": delivery_id.encode() in redis.lrange(keys.rq.queue(settings.queue_name), 0, -1),
        "queues": redis.smembers(keys.rq.queues),
        "log": {k: v for k, v in fields.items() if k != b"body"},
        "log_ttl": 0 < redis.ttl(keys.callback_log(appid)) <= settings.log_retention + 60,
    }


def test_queue_delivery_writes_what_the_ingest_script_writes(settings: Settings, redis: Redis) -> None:
    posted, queued = provision(settings), provision(settings)
    events = [{"id": "m1", "n": 1}, {"id": "m2", "n": 2}]
    raw = orjson.dumps({"event_type": "Msg", "events": events})

    async def ingest() -> str | None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            return (await Ingest(client, keys, settings).accept(posted.appid, posted.receiver_token, raw)).delivery_id
        finally:
            await client.aclose()

    from_post = asyncio.run(ingest())
    assert from_post is not None
    from_service = new_delivery_id()
    with redis.pipeline(transaction=True) as pipe:
        queue_delivery(pipe, keys, settings, appid=queued.appid, account=queued.account, event_type="Msg",
                       events=events, delivery_id=from_service, now=time.time(),
                       chain=service_chain(redis, queued.appid))
        pipe.execute()

    other = _written(redis, settings, queued.appid, from_service)
    # A service event also has its instance's seq, and its place in its instance's order.
    assert other["record"].pop(b"seq") == b"1"
    assert other["record"].pop(b"chain") == keys.service_events(queued.appid).encode()
    numbered = [{**e, "seq": n} for n, e in enumerate(events, 1)]
    assert other["record"].pop(b"appid") == queued.appid.encode()
    assert other["record"].pop(b"account") == queued.account.encode()
    assert other["record"].pop(b"body") == build_envelope(queued.appid, "Msg", [orjson.dumps(e) for e in numbered])
    assert other["record"] == {b"event_type": b"Msg", b"state": b"queued", b"attempts": b"0", b"failures": b"0",
                               b"events": b"2"}  # fmt: skip
    data = other["job"].pop(b"data")
    assert json.loads(zlib.decompress(data)) == [FUNC_NAME, None, [from_service], {}]
    assert other["job"].pop(b"description") == f"Msg for {queued.appid}".encode()
    assert other["log"] == {b"delivery": from_service.encode(), b"accepted": b"2", b"duplicates": b"0"}

    # A post's delivery is named by its log entry (svcgw.deliveryid), whose fields are the post alone,
    # and has one hash: RQ's job hash, holding RQ's fields that Job.fetch reads and the delivery's.
    (entry,) = redis.xrange(keys.callback_log(posted.appid))
    assert from_post == deliveryid.from_entry(posted.appid, entry[0].decode()) and entry[1] == {b"body": raw}
    assert keys.delivery(from_post) == keys.rq.job(from_post)
    assert not redis.exists(keys.prefix + "delivery:" + from_post)
    one = redis.hgetall(keys.rq.job(from_post))
    assert json.loads(zlib.decompress(one.pop(b"data"))) == [FUNC_NAME, None, [from_post], {}]
    assert one.pop(b"created_at")
    assert one.pop(b"body") == build_envelope(posted.appid, "Msg", [orjson.dumps(e) for e in events])
    assert one == {b"origin": settings.queue_name.encode(), b"status": b"queued", b"appid": posted.appid.encode(),
                   b"account": posted.account.encode(), b"event_type": b"Msg"}  # fmt: skip
    assert other["queued"] and from_post.encode() in redis.lrange(keys.rq.queue(settings.queue_name), 0, -1)
    assert other["log_ttl"] and 0 < redis.ttl(keys.callback_log(posted.appid)) <= settings.log_retention + 60
    assert other["queues"] == {keys.rq.queue(settings.queue_name).encode()}


def test_queue_delivery_only_buffers_on_an_asyncio_transaction(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    delivery_id = new_delivery_id()

    async def main() -> None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            async with client.pipeline(transaction=True) as pipe:
                await pipe.watch(keys.instance(tenant.appid))
                pipe.multi()  # type: ignore[no-untyped-call]
                result = queue_delivery(pipe, keys, settings, appid=tenant.appid, account=tenant.account,  # type: ignore[func-returns-value]
                                        event_type="InstanceOffline", events=[{"id": "x"}],
                                        delivery_id=delivery_id, now=time.time(), chain=[])
                assert result is None
                assert redis.exists(keys.delivery(delivery_id)) == 0  # nothing sent before EXEC
                await pipe.execute()
        finally:
            await client.aclose()

    asyncio.run(main())
    job = Job.fetch(delivery_id, connection=redis, serializer=JSONSerializer)
    assert job.args == [delivery_id] and job.get_status() == "queued"
    assert job.description == f"InstanceOffline for {tenant.appid}"
    assert redis.hget(keys.delivery(delivery_id), "state") == b"queued"


def test_delivery_ids() -> None:
    first, second = new_delivery_id(), new_delivery_id()
    assert first != second
    assert all(len(i) == 28 and i.startswith("dlv_") and int(i[4:], 16) >= 0 for i in (first, second))


# --- service events: seq and their order per instance ------------------------------------
def _queue_service_event(
    settings: Settings, tenant: Any, events: list[dict[str, Any]], kind: str = "InstanceOffline"
) -> str:
    delivery_id = new_delivery_id()
    client = Redis.from_url(settings.redis_url or "")
    try:
        with client.pipeline(transaction=True) as pipe:
            queue_delivery(pipe, keys, settings, appid=tenant.appid, account=tenant.account, event_type=kind,
                           events=events, delivery_id=delivery_id, now=time.time(),
                           chain=service_chain(client, tenant.appid))
            pipe.execute()
    finally:
        client.close()
    return delivery_id


def _events(redis: Redis, delivery_id: str) -> list[dict[str, Any]]:
    return orjson.loads(redis.hget(keys.delivery(delivery_id), "body") or b"")["events"]  # type: ignore[no-any-return]


def _queued(redis: Redis, settings: Settings) -> list[str]:
    return [x.decode() for x in redis.lrange(keys.rq.queue(settings.queue_name), 0, -1)]


def _deferred(redis: Redis, settings: Settings) -> list[str]:
    return [x.decode() for x in redis.zrange(keys.rq.deferred(settings.queue_name), 0, -1)]


def test_service_events_get_their_instances_next_seq(settings: Settings, redis: Redis) -> None:
    one, other = provision(settings), provision(settings)
    first = _queue_service_event(settings, one, [{"id": "a"}])
    pair = _queue_service_event(settings, one, [{"id": "b", "x": [1]}, {}])
    elsewhere = _queue_service_event(settings, other, [{"id": "c"}])
    last = _queue_service_event(settings, one, [{"id": "d"}])
    assert _events(redis, first) == [{"id": "a", "seq": 1}]
    assert _events(redis, pair) == [{"id": "b", "x": [1], "seq": 2}, {"seq": 3}]
    assert _events(redis, elsewhere) == [{"id": "c", "seq": 1}]
    assert _events(redis, last) == [{"id": "d", "seq": 4}]
    assert redis.hget(keys.delivery(pair), "seq") == b"2"
    # The callback log has the body as delivered, seq included.
    logged = [orjson.loads(entry[b"body"]) for _, entry in redis.xrange(keys.callback_log(one.appid))]
    assert [e["seq"] for body in logged for e in body["events"]] == [1, 2, 3, 4]
    # The seq is the service's to give.
    try:
        _queue_service_event(settings, one, [{"id": "e", "seq": 99}])
    except ValueError as exc:
        assert "seq" in str(exc)
    else:
        raise AssertionError("an event with a seq of its own was queued")


def test_a_later_service_event_waits_behind_the_earlier_one(settings: Settings, redis: Redis) -> None:
    """Off the queue, in RQ's deferred registry (read with RQ's API in tests/svcgw/storage/test_rqformat.py)."""
    one, other = provision(settings), provision(settings)
    offline = _queue_service_event(settings, one, [{"id": "off"}])
    recovered = _queue_service_event(settings, one, [{"id": "rec"}], kind="InstanceRecovered")
    elsewhere = _queue_service_event(settings, other, [{"id": "x"}])
    assert _queued(redis, settings) == [offline, elsewhere]
    assert _deferred(redis, settings) == [recovered]
    assert redis.hget(keys.delivery(recovered), "state") == b"queued"  # pending, for people
    assert redis.lrange(keys.service_events(one.appid), 0, -1) == [offline.encode(), recovered.encode()]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)


@given(
    events=st.lists(st.dictionaries(st.text(max_size=8).filter(lambda k: k != "seq"), _JSON, max_size=4), max_size=4),
    first=st.integers(min_value=1, max_value=2**53),
    event_type=st.text(max_size=10),
)
def test_seq_pieces_put_each_seq_last_in_its_event_and_nowhere_else(
    events: list[dict[str, Any]], first: int, event_type: str
) -> None:
    pieces = seq_pieces("we_x", event_type, events)
    assert len(pieces) == len(events) + 1
    body = b"".join(piece + (b"%d" % (first + n) if n < len(events) else b"") for n, piece in enumerate(pieces))
    numbered = [{**event, "seq": first + n} for n, event in enumerate(events)]
    assert orjson.loads(body) == {"appid": "we_x", "event_type": event_type, "events": numbered}
    assert all(list(event)[-1] == "seq" for event in orjson.loads(body)["events"])
