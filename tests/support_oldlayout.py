"""The layout before deliveries were named by their posts, written as that version wrote it: the upgrade's fixtures.

Each writer is the few lines of that version's Lua and HSETs a delivery's state needed (its
``delivery.lua``, ``queue_finish.lua``): a ``dlv_`` delivery with a hash of its own
(``svcgw:delivery:<id>``) beside RQ's job hash with every field ``Job.create`` writes, and a log
entry with ``received_at``, ``delivery``, ``accepted`` and ``duplicates``. Nothing here calls the
service's code but for key names, de-duplication keys and RQ's job fields, so that the test of the upgrade keeps
describing what is in a deployment when the new version starts.
"""

from __future__ import annotations

__all__ = ["dead", "delivered", "post", "retrying", "service_event", "untag"]

import time
from datetime import UTC, datetime
from typing import Any

import orjson
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.delivery.queueing import queue_delivery
from svcgw.deliveryid import new_delivery_id
from svcgw.intake.envelope import build_envelope, parse_post
from svcgw.storage import renames
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.rqformat import FAILED, exc_info_field, failed_score, job_description, job_fields_by_rq, rq_time
from tests.conftest import Tenant
from tests.support import service_chain

# The ingest script's delivery write and log entry of that version (delivery.lua), verbatim but
# for taking its keys and arguments directly; the de-duplication keys were strings with a TTL.
_POST = """
local k = {delivery = KEYS[1], job = KEYS[2], queue = KEYS[3], rq_queues = KEYS[4]}
local appid, account, event_type, body, now, count, delivery_id, queue_key = unpack(ARGV, 1, 8)
local job = {}
for f = 12, #ARGV do job[#job + 1] = ARGV[f] end
redis.call('HSET', k.delivery, 'appid', appid, 'account', account, 'event_type', event_type,
  'body', body, 'state', 'queued', 'received_at', now, 'attempts', 0, 'failures', 0,
  'events', count)
redis.call('HSET', k.job, unpack(job))
if redis.call('RPUSH', k.queue, delivery_id) == 1 then redis.call('SADD', k.rq_queues, queue_key) end
local retention = ARGV[9]
local oldest = math.floor(tonumber(now) * 1000) - tonumber(retention) * 1000
redis.call('XADD', KEYS[5], 'MINID', '~', oldest, '*', 'body', ARGV[10], 'received_at', now,
  'delivery', delivery_id, 'accepted', count, 'duplicates', 0)
redis.call('EXPIRE', KEYS[5], retention)
for i = 6, #KEYS do redis.call('SET', KEYS[i], 1, 'NX', 'EX', ARGV[11]) end
"""


def post(redis: Redis, settings: Settings, tenant: Tenant, event_ids: list[str], *, now: float | None = None) -> str:
    """One post of new events, as that version's receiver stored it: its ``dlv_`` delivery, queued."""
    delivery_id = new_delivery_id()
    moment = time.time() if now is None else now
    raw_events = [orjson.dumps({"id": event_id, "text": "before the upgrade"}) for event_id in event_ids]
    posted = b'{"event_type":"Msg","events":[' + b",".join(raw_events) + b"]}"
    job = job_fields_by_rq(delivery_id, queue_name=settings.queue_name,
                           description=job_description("Msg", tenant.appid),
                           failure_ttl=settings.dead_letter_retention)  # fmt: skip
    queue_key = keys.rq.queue(settings.queue_name)
    events = parse_post(posted, max_bytes=settings.max_body_bytes).events
    redis.eval(
        _POST,
        5 + len(event_ids),
        keys.prefix + "delivery:" + delivery_id,
        keys.rq.job(delivery_id),
        queue_key,
        keys.rq.queues,
        renames.untagged_instance_keys(tenant.appid)[0],  # the log
        *(keys.dedup(tenant.appid, event.key or "") for event in events),
        tenant.appid, tenant.account, "Msg", build_envelope(tenant.appid, "Msg", raw_events), repr(moment),
        len(event_ids), delivery_id, queue_key, settings.log_retention, posted, max(settings.log_retention, 86400),
        *(part for name, value in job.items() for part in (name, value)),
    )  # fmt: skip
    return delivery_id


def _record(number: int, status: int, at: float) -> bytes:
    error = None if status < 300 else f"HTTP {status}"
    return orjson.dumps({"attempt": number, "at": round(at, 3), "ok": 200 <= status < 300, "status": status,
                         "error": error, "duration_ms": 12.5, "destination": "https://old.example/hook",
                         "response": "answer before the upgrade"})  # fmt: skip


def _claimed_off_the_queue(redis: Redis, settings: Settings, delivery_id: str) -> None:
    redis.lrem(keys.rq.queue(settings.queue_name), 0, delivery_id)


def retrying(redis: Redis, settings: Settings, delivery_id: str, *, due: float) -> None:
    """One failed attempt, the next due at ``due`` (queue_finish.lua, kind retry)."""
    _claimed_off_the_queue(redis, settings, delivery_id)
    record = keys.prefix + "delivery:" + delivery_id
    redis.hincrby(record, "attempts", 1)
    redis.hincrby(record, "failures", 1)
    redis.hset(record, mapping={"a1": _record(1, 503, time.time()), "state": "retrying", "next_at": repr(due)})
    redis.zadd(keys.rq.scheduled(settings.queue_name), {delivery_id: due})
    redis.hset(keys.rq.job(delivery_id), "status", "scheduled")


def delivered(redis: Redis, settings: Settings, delivery_id: str, event_ids: list[str]) -> None:
    """Delivered at its first attempt: the hash kept, its body emptied for its ids (kind delivered)."""
    _claimed_off_the_queue(redis, settings, delivery_id)
    record = keys.prefix + "delivery:" + delivery_id
    redis.hincrby(record, "attempts", 1)
    now = time.time()
    ended: dict[Any, Any] = {"state": "delivered", "delivered_at": repr(now), "a1": _record(1, 200, now)}
    redis.hset(record, mapping={**ended, "body": "", "ids": orjson.dumps(event_ids)})
    redis.expire(record, max(settings.log_retention, 86400))
    redis.delete(keys.rq.job(delivery_id))


def dead(redis: Redis, settings: Settings, tenant: Tenant, delivery_id: str) -> None:
    """Its retries ran out (kind dead): in RQ's failed registry and the instance's dead index."""
    _claimed_off_the_queue(redis, settings, delivery_id)
    now, ttl = time.time(), settings.dead_letter_retention
    record = keys.prefix + "delivery:" + delivery_id
    redis.hincrby(record, "attempts", 1)
    redis.hincrby(record, "failures", len(settings.retry_schedule) + 1)
    redis.hset(record, mapping={"a1": _record(1, 500, now), "state": "dead", "dead_at": repr(now)})
    redis.zadd(keys.rq.failed(settings.queue_name), {delivery_id: failed_score(now, ttl)})
    ended = rq_time(datetime.now(UTC).replace(tzinfo=None))
    job: dict[Any, Any] = {"status": FAILED, "exc_info": exc_info_field("HTTP 500"), "ended_at": ended}
    redis.hset(keys.rq.job(delivery_id), mapping=job)
    for key in (keys.rq.job(delivery_id), record):
        redis.expire(key, ttl)
    redis.sadd(renames.untagged_instance_keys(tenant.appid)[1], delivery_id)  # the dead index


def untag(redis: Redis, appid: str) -> None:
    """The instance's log, dead index, service-event list and seq under the names of before the shard
    tags, and its service events' ``chain`` field naming the list so (what the previous version wrote)."""
    chain = keys.service_events(appid)
    for delivery_id in redis.lrange(chain, 0, -1):
        redis.hset(keys.delivery(delivery_id.decode()), "chain", renames.untagged_instance_keys(appid)[2])
    for new, old in zip(renames.tagged_instance_keys(keys, appid), renames.untagged_instance_keys(appid), strict=True):
        if redis.exists(new):
            redis.rename(new, old)


def service_event(redis: Redis, settings: Settings, tenant: Tenant, kind: str) -> str:
    """A service event as the version before the shard tags queued it: the same script, untagged names."""
    delivery_id = new_delivery_id()
    untagged = renames.untagged_instance_keys(tenant.appid)
    for old, new in zip(untagged, renames.tagged_instance_keys(keys, tenant.appid), strict=True):
        if redis.exists(old):
            redis.rename(old, new)
    with redis.pipeline(transaction=True) as pipe:
        queue_delivery(pipe, keys, settings, appid=tenant.appid, account=tenant.account, event_type=kind,
                       events=[{"id": f"{kind}-before"}], delivery_id=delivery_id, now=time.time(),
                       chain=service_chain(redis, tenant.appid))  # fmt: skip
        pipe.execute()
    untag(redis, tenant.appid)
    return delivery_id
