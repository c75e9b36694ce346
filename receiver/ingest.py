"""The per-instance receiver: where the capability layer posts events.

``POST /svc/receiver/{appid}/{token}``: the token is the instance's secret
part of the URL; a wrong token or an unknown appid answers 404 and stores
nothing. An accepted post is, in one Lua script (one round trip):

1. checked against the receiver token's digest;
2. de-duplicated event by event (``svcgw.envelope`` defines the keys);
3. turned into one delivery, an RQ job queued for the workers, if any
   event is new;
4. appended raw, as received, to the instance's callback log.

Only then is it answered 200, so every acknowledged event is in Redis.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import Response

from svcgw import errors, keys, liveness
from svcgw.deliveries import template
from svcgw.envelope import EnvelopeError, Post, build_envelope, parse_post
from svcgw.metrics import DUPLICATES, EVENTS, POSTS
from svcgw.settings import Settings
from svcgw.store import digest

from .http import BadContentLength, BodyTooLarge, json_answer, read_body

__all__ = ["Ingest", "IngestResult"]

log = logging.getLogger("svcgw.receiver")

# KEYS: receiver lookup, instance, log, delivery, job, queue, rq:queues,
#       metrics counters, dedup...
# ARGV: appid, now, log retention, raw body, event_type, envelope head,
#       keyed ttl, unkeyed ttl, delivery id, queue key, job field count,
#       job fields..., the posts, events and duplicates counter fields,
#       then per event: raw, keyed flag
# The /metrics counters of a post (svcgw.metrics.ingest_commands) are
# bumped here too: a second round trip per post cost a quarter of the
# receiver's throughput.
_INGEST = """
local appid = ARGV[1]
if redis.call('GET', KEYS[1]) ~= appid then return {-1, 0, 0} end
local account = redis.call('HGET', KEYS[2], 'account')
if not account then return {-1, 0, 0} end
local nfields = tonumber(ARGV[11])
local counters = 12 + nfields * 2
local first_event = counters + 3
local kept = {}
local total = 0
local i = first_event
local k = 9
while i <= #ARGV do
  local ttl = ARGV[8]
  if ARGV[i + 1] == '1' then ttl = ARGV[7] end
  if redis.call('SET', KEYS[k], ARGV[9], 'NX', 'EX', ttl) then
    kept[#kept + 1] = ARGV[i]
  end
  total = total + 1
  i = i + 2
  k = k + 1
end
local delivery = ''
if #kept > 0 then
  delivery = ARGV[9]
  local body = ARGV[6] .. table.concat(kept, ',') .. ']}'
  redis.call('HSET', KEYS[4], 'appid', appid, 'account', account, 'event_type', ARGV[5],
    'body', body, 'state', 'queued', 'received_at', ARGV[2], 'attempts', 0, 'failures', 0,
    'events', #kept)
  local fields = {}
  for f = 12, 11 + nfields * 2 do fields[#fields + 1] = ARGV[f] end
  redis.call('HSET', KEYS[5], unpack(fields))
  redis.call('RPUSH', KEYS[6], ARGV[9])
  redis.call('SADD', KEYS[7], ARGV[10])
end
local now_ms = math.floor(tonumber(ARGV[2]) * 1000)
local oldest = now_ms - tonumber(ARGV[3]) * 1000
redis.call('XADD', KEYS[3], 'MINID', '~', oldest, '*', 'body', ARGV[4], 'received_at', ARGV[2],
  'delivery', delivery, 'accepted', #kept, 'duplicates', total - #kept)
redis.call('EXPIRE', KEYS[3], ARGV[3])
redis.call('HINCRBY', KEYS[8], ARGV[counters], 1)
if total > 0 then redis.call('HINCRBY', KEYS[8], ARGV[counters + 1], total) end
if total > #kept then redis.call('HINCRBY', KEYS[8], ARGV[counters + 2], total - #kept) end
return {1, #kept, total - #kept}
"""


_COUNTER_FIELDS = (POSTS, EVENTS, DUPLICATES)


@dataclass(frozen=True)
class IngestResult:
    accepted: int
    duplicates: int
    delivery_id: str | None


class UnknownReceiver(LookupError):
    """No instance has this receiver URL."""


class ReplicaNotConfirmed(RedisError):
    """Durable mode: fewer replicas than ``SVCGW_REDIS_WAIT_REPLICAS`` confirmed a post in time.

    A ``RedisError``, so the post is answered 503 like any storage failure:
    the sender posts it again, and de-duplication keeps the repeat from
    being forwarded twice.
    """


class Ingest:
    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings
        self._script = redis.register_script(_INGEST)
        self._wait_replicas = settings.redis_wait_replicas
        self._wait_ms = max(1, round(settings.redis_wait_timeout * 1000))
        self._keyed_ttl = max(settings.log_retention, 86400)
        self._unkeyed_ttl = settings.unkeyed_dedup_window
        self._queue_key = keys.rq_queue(settings.queue_name)
        self._job = template(settings.queue_name, settings.dead_letter_retention)

    async def accept(self, appid: str, token: str, body: bytes) -> IngestResult:
        post = parse_post(body, max_bytes=self.settings.max_body_bytes)
        if post.appid is not None and post.appid != appid:
            raise EnvelopeError("appid in the body does not match this receiver", status=422)
        result = await self._store(appid, token, body, post)
        if post.event_type == "GapClosed":
            await self._gap_closed(appid, post)
        return result

    async def _gap_closed(self, appid: str, post: Post) -> None:
        """Liveness hook: a GapClosed changes what the prober does next (``svcgw.liveness.on_gap_closed``).

        Runs after the post is stored, for repeats too (acting twice on a close
        is harmless). It must never turn a stored post into an error answer, or
        the sender would post it again: failures are logged, and the next
        regular probe finds the loss anyway.
        """
        try:
            closes = liveness.parse_gap_closed([event.raw for event in post.events])
            await liveness.on_gap_closed(self.redis, appid, closes)
        except Exception:
            log.exception("GapClosed not handed to the prober", extra={"appid": appid})

    async def _run_script(self, *, keys: list[Any], args: list[Any]) -> Any:
        """The ingest script; in the durable mode, followed by ``WAIT`` for the replicas.

        WAIT counts the writes of the connection it is sent on, so it travels
        with the script in one pipeline: both go on one connection, and a
        pipeline retried after a broken connection retries both.
        """
        if not self._wait_replicas:
            return await self._script(keys=keys, args=args)
        async with self.redis.pipeline(transaction=False) as pipe:
            await self._script(keys=keys, args=args, client=pipe)
            pipe.execute_command("WAIT", self._wait_replicas, self._wait_ms)
            result, confirmed = await pipe.execute()
        if int(result[0]) >= 0 and int(confirmed) < self._wait_replicas:
            raise ReplicaNotConfirmed(
                f"{confirmed} of {self._wait_replicas} replicas confirmed the write within {self._wait_ms} ms"
            )
        return result

    async def _store(self, appid: str, token: str, body: bytes, post: Post) -> IngestResult:
        delivery_id = "dlv_" + secrets.token_hex(12)
        now = time.time()
        flat = self._job.flat(delivery_id, f"{post.event_type} for {appid}")
        events: list[Any] = []
        dedup_keys = []
        for event in post.events:
            events.extend((event.raw, "1" if event.keyed else "0"))
            dedup_keys.append(keys.dedup(appid, event.key))
        head = build_envelope(appid, post.event_type, [])[:-2]  # up to and including '['
        result = cast(
            list[int],
            await self._run_script(
                keys=[
                    keys.receiver_lookup(digest(token)),
                    keys.instance(appid),
                    keys.callback_log(appid),
                    keys.delivery(delivery_id),
                    keys.rq_job(delivery_id),
                    self._queue_key,
                    keys.RQ_QUEUES,
                    keys.METRICS_COUNTERS,
                    *dedup_keys,
                ],
                args=[
                    appid,
                    repr(now),
                    self.settings.log_retention,
                    body,
                    post.event_type,
                    head,
                    self._keyed_ttl,
                    self._unkeyed_ttl,
                    delivery_id,
                    self._queue_key,
                    len(flat) // 2,
                    *flat,
                    *_COUNTER_FIELDS,
                    *events,
                ],
            ),
        )
        status, accepted, duplicates = (int(x) for x in result)
        if status < 0:
            raise UnknownReceiver(appid)
        return IngestResult(accepted, duplicates, delivery_id if accepted else None)


def make_endpoint(ingest: Ingest) -> Callable[[Request], Awaitable[Response]]:
    async def receive(request: Request) -> Response:
        appid = request.path_params["appid"]
        token = request.path_params["token"]
        try:
            body = await read_body(request, ingest.settings.max_body_bytes, strict=True)
            result = await ingest.accept(appid, token, body)
        except BadContentLength as exc:
            return errors.RECEIVER_BAD_BODY.response(str(exc))
        except BodyTooLarge as exc:
            return errors.RECEIVER_TOO_LARGE.response(str(exc))
        except EnvelopeError as exc:
            return errors.receiver_kind(exc.status).response(str(exc))
        except UnknownReceiver:
            return errors.RECEIVER_NOT_FOUND.response()
        except RedisError:
            # Not stored, so not acknowledged: the sender must try again.
            response = errors.RECEIVER_UNAVAILABLE.response()
            response.headers["Retry-After"] = "1"
            return response
        return json_answer(0, "ok", {"accepted": result.accepted, "duplicates": result.duplicates})

    return receive
