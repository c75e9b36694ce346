"""Storing a post to a receiver: one script call, one round trip.

:class:`Ingest` runs the ingest script (``ingest`` of :mod:`svcgw.storage.scripts`),
which, atomically:

1. checks the receiver token's digest against the appid;
2. drops repeated events one by one (``svcgw.intake.envelope`` defines the keys;
   an event without an ``id`` has none and is always forwarded), against the
   instance's de-duplication window (:mod:`svcgw.intake.dedup`, kept as the
   deployment's layout marker says, :mod:`svcgw.storage.layoutversion`: read at the first
   post, once per process; its buckets, on servers without per-field expiry,
   numbered by Redis's clock);
3. writes one delivery, an RQ job queued for the workers, if any event is new;
   and one more per further destination that takes the post (:mod:`svcgw.intake.fanout`),
   each in its destination's index;
4. appends the post, as received (compressed when that pays:
   ``svcgw.intake.calllog.stored_body``), to the instance's callback log, whose
   entry also lists the delivery for the deliveries list (and the further
   destinations' deliveries, in its field ``f``).

Which further destinations take a post is asked of ``targets`` (the receiver's
:class:`svcgw.callbacks.routecache.RoutesCache`, which reads the routing
records once a second per instance); without it, posts go to the primary
address alone. A post no destination takes calls the script exactly as it
always did.

The /metrics counters of the posts are kept in memory and written twice a
second (:class:`svcgw.counters.BufferedCounts`); :meth:`Ingest.aclose`
writes what is left.

Before anything is read or parsed, :meth:`Ingest.check_receiver` checks the
token with one ``GET`` (or a recent answer for the same token), so a
stranger's post costs one Redis read and no parsing; the script checks again,
so a token revoked in between is still refused atomically. A post carries at
most ``SVCGW_MAX_EVENTS_PER_POST`` events (413), and a large body is parsed
in a worker thread, off the event loop.

In the durable mode (``SVCGW_REDIS_WAIT_REPLICAS``) the script is followed
by ``WAIT``. The HTTP endpoint is :mod:`receiver.endpoint`.

Errors raised by :meth:`Ingest.accept`::

    svcgw.intake.envelope.EnvelopeError   the body is not a post (its ``status``: 400, 413, 422);
                                   413 also for more than SVCGW_MAX_EVENTS_PER_POST events
    UnknownReceiver                (a LookupError) no instance has this appid and token;
                                   also raised by check_receiver
    redis.exceptions.RedisError    not stored
    ├── ReplicaNotConfirmed        durable mode: too few replicas confirmed in time
    └── EntryIdsTaken              the log refused one proposed entry id after another
    svcgw.storage.layoutversion.LayoutError
                                   the layout marker names a layout this version or this Redis cannot keep
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import RedisError

from svcgw.config.settings import Settings
from svcgw.counters import BufferedCounts, ingest_commands
from svcgw.deliveryid import EntryClock, from_entry, new_delivery_id, takes_entry_ids
from svcgw.digests import digest
from svcgw.errors import Failure, Missing
from svcgw.intake import dedup, gapclosed
from svcgw.intake.calllog import stored_body
from svcgw.intake.envelope import EnvelopeError, Post, build_envelope, parse_post
from svcgw.intake.fanout import FanOut, Targets, plan
from svcgw.storage import layoutversion
from svcgw.storage.keys import KeySpace
from svcgw.storage.rqformat import job_description, template
from svcgw.storage.scripts import ScriptBatch, register
from svcgw.threads import in_thread

__all__ = ["EntryIdsTaken", "Ingest", "IngestResult", "ReplicaNotConfirmed", "UnknownReceiver"]

log = logging.getLogger("svcgw.receiver")

# Bodies above this are parsed in a worker thread: below it, parsing takes
# less time than handing it over.
PARSE_IN_THREAD_BYTES = 64 * 1024

# Tokens seen valid are trusted by the early check for this long (the script
# still checks every post); only valid ones are kept, at most this many.
KNOWN_TOKEN_SECONDS = 10.0
KNOWN_TOKENS = 10_000

# The ingest script's answer for a proposed log entry id not above the log's last, and how many are proposed.
# Posts to one instance in flight at once land out of the order their ids were proposed in, and each
# refused one proposes again above the last: with 16 at once over two receivers, 2,000 posts took
# about 3,100 script calls, and 5 tries refused one post in 2,000 (a 503 the sender must repeat).
# A try costs a round trip only under such contention; the bound only keeps a broken clock finite.
ENTRY_TAKEN = -2
ENTRY_TRIES = 50
# Its answer for de-duplication buckets named for another bucket than Redis's clock gives (svcgw.intake.dedup).
OTHER_BUCKET = -3


@dataclass(frozen=True)
class IngestResult:
    accepted: int
    duplicates: int
    delivery_id: str | None
    # (delivery id, destination id) of the further destinations' deliveries written.
    destination_deliveries: tuple[tuple[str, str], ...] = ()


class EntryIdsTaken(Failure, RedisError):
    """The log refused one proposed entry id after another (clocks far apart): answered 503 like a storage failure."""


class UnknownReceiver(Missing, LookupError):
    """No instance has this receiver URL."""


class ReplicaNotConfirmed(Failure, RedisError):
    """Durable mode: fewer replicas than ``SVCGW_REDIS_WAIT_REPLICAS`` confirmed a post in time.

    A ``RedisError``, so the post is answered 503 like any storage failure:
    the sender posts it again, and de-duplication keeps the repeat from
    being forwarded twice.
    """


class Ingest:
    """Stores posts to the receivers; ``redis`` is an asyncio client that returns bytes.

    ``clock`` is the receiver's clock (Unix seconds): a post's time received, its log entry id
    and the log's trimming are read from it. ``targets`` names the further destinations of a
    post (:mod:`svcgw.intake.fanout`); without it, posts go to the primary address alone.
    ``batch``: the ingest script's batch (:mod:`svcgw.storage.scriptbatch`) to share with the
    other shards on ``redis`` (a Cluster's virtual shards); without it, one of its own.
    """

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        targets: Targets | None = None,
        batch: ScriptBatch | None = None,
    ) -> None:
        self.redis = redis
        self.keys = keys  # the shard's
        self.settings = settings
        self._clock = clock
        self._targets = targets
        self._script = register(redis, "ingest")
        # The posts of one turn of the event loop go to Redis in one pipeline (svcgw.storage.scriptbatch):
        # at saturation redis-py's command path was a quarter of a post's CPU.
        self._batch = batch if batch is not None else ScriptBatch(self._script)
        self._wait_replicas = settings.redis_wait_replicas
        self._wait_ms = max(1, round(settings.redis_wait_timeout * 1000))
        self._window = dedup.window(settings)
        # The deployment's layout and whether the server has HSETEX: read at the first post.
        self._layout: tuple[layoutversion.Layout, bool] | None = None
        self._queue_key = keys.rq.queue(settings.queue_name)
        self._job = template(settings.queue_name, settings.dead_letter_retention)
        self._known: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._entries = EntryClock()
        # Redis's de-duplication bucket less this clock's, as the script last answered (buckets mode).
        self._bucket_offset = 0
        # The /metrics counters of the posts: in memory, written twice a second.
        self.counts = BufferedCounts(settings, keys, redis)

    async def aclose(self) -> None:
        """Write the counts still held (the app's shutdown calls it); the client is the caller's."""
        await self.counts.aclose()

    async def check_receiver(self, appid: str, token: str) -> None:
        """Raise :class:`UnknownReceiver` unless ``token`` is ``appid``'s receiver token.

        One ``GET`` of the token digest's look-up key, unless the same token
        was found within :data:`KNOWN_TOKEN_SECONDS`. Only tokens that exist
        are remembered (with their appid), so made-up ones cannot crowd the
        real ones out.
        """
        hashed = digest(token)
        now = time.monotonic()
        known = self._known.get(hashed)
        if known is not None and known[0] == appid and known[1] > now:
            return
        owner = await self.redis.get(self.keys.receiver_lookup(hashed))
        if isinstance(owner, bytes):
            owner = owner.decode("utf-8", "replace")
        if owner is None:
            self._known.pop(hashed, None)
        else:
            self._known[hashed] = (owner, now + KNOWN_TOKEN_SECONDS)
            self._known.move_to_end(hashed)
            while len(self._known) > KNOWN_TOKENS:
                self._known.popitem(last=False)
        if owner != appid:
            raise UnknownReceiver(appid)

    async def accept(self, appid: str, token: str, body: bytes) -> IngestResult:
        """Parse and store one post; call :meth:`check_receiver` before reading the body."""
        post = await self._parse(body)
        if post.appid is not None and post.appid != appid:
            raise EnvelopeError("appid in the body does not match this receiver", status=422)
        result = await self._store(appid, token, body, post)
        if post.event_type == "GapClosed":
            await self._gap_closed(appid, post)
        return result

    async def _parse(self, body: bytes) -> Post:
        limits = {"max_bytes": self.settings.max_body_bytes, "max_events": self.settings.max_events_per_post}
        if len(body) <= PARSE_IN_THREAD_BYTES:
            return parse_post(body, **limits)
        return await in_thread(lambda: parse_post(body, **limits))

    async def _gap_closed(self, appid: str, post: Post) -> None:
        """Liveness hook: a GapClosed changes what the prober does next (``svcgw.intake.gapclosed.on_gap_closed``).

        Runs after the post is stored, for repeats too (acting twice on a close
        is harmless). It must never turn a stored post into an error answer, or
        the sender would post it again: failures are logged, and the next
        regular probe finds the loss anyway.
        """
        try:
            closes = gapclosed.parse_gap_closed([event.raw for event in post.events])
            await gapclosed.on_gap_closed(self.redis, self.keys, appid, closes)
        except Exception:
            log.exception("GapClosed not handed to the prober", extra={"appid": appid})

    async def _dedup_layout(self) -> tuple[layoutversion.Layout, bool]:
        """The layout marker (written first if no process has yet), once per process."""
        if self._layout is None:
            marker, server = await layoutversion.read(self.redis, self.keys)
            self._layout = (marker, server.hsetex)
        return self._layout

    async def _run_script(self, *, keys: list[Any], args: list[Any]) -> Any:
        """The ingest script, sent with the other posts of this turn; in the durable mode, alone, followed by
        ``WAIT`` for the replicas.

        WAIT counts the writes of the connection it is sent on, so it travels
        with the script in one pipeline: both go on one connection, and a
        pipeline retried after a broken connection retries both.
        """
        if not self._wait_replicas:
            return await self._batch(keys=keys, args=args)
        if isinstance(self.redis, AsyncRedisCluster):
            result, confirmed = await self._run_on_cluster_node(keys, args)
        else:
            async with self.redis.pipeline(transaction=False) as pipe:
                await self._script(keys=keys, args=args, client=pipe)
                pipe.execute_command("WAIT", self._wait_replicas, self._wait_ms)
                result, confirmed = await pipe.execute()
        if int(result[0]) >= 0 and int(confirmed) < self._wait_replicas:
            raise ReplicaNotConfirmed(
                f"{confirmed} of {self._wait_replicas} replicas confirmed the write within {self._wait_ms} ms"
            )
        return result

    async def _run_on_cluster_node(self, keys: list[Any], args: list[Any]) -> tuple[Any, Any]:
        """The script and ``WAIT`` on one connection to the master of the script's slot, on a Cluster.

        redis-py's Cluster pipeline refuses a script object's ``EVALSHA`` and would send a keyless
        ``WAIT`` to any node; named with ``target_nodes``, both go down one connection of that master, in
        order. The script is sent whole (``EVAL``): a master that has not loaded it yet (just promoted,
        or added) runs it all the same. It costs one more round trip than on one Redis.
        """
        cluster = cast(AsyncRedisCluster, self.redis)
        # A keyed command first: the client learns the slots on first use, and again after a node failed
        # (skipping that node), which a pipeline's own start does not; then the slot's master is the one known.
        await cluster.exists(keys[0])
        node = cluster.get_node_from_key(keys[0])
        async with cluster.pipeline(transaction=False) as pipe:
            pipe.execute_command("EVAL", self._script.script, len(keys), *keys, *args, target_nodes=node)
            pipe.execute_command("WAIT", self._wait_replicas, self._wait_ms, target_nodes=node)
            result, confirmed = await pipe.execute()
        return result, confirmed

    async def _store(self, appid: str, token: str, body: bytes, post: Post) -> IngestResult:
        if len(body) <= PARSE_IN_THREAD_BYTES:
            logged = stored_body(body)
        else:
            logged = await in_thread(stored_body, body)
        # The further destinations that take the post: the same for every try.
        destinations: list[str] = []
        if self._targets is not None and post.events:
            destinations = await self._targets.targets(appid, post.event_type)
        # The log's last entry is above the one proposed only when another receiver (or a
        # service event) wrote the same instance's log this millisecond or with a clock ahead.
        # Redis's de-duplication bucket is another than the one named only when this clock and
        # Redis's disagree about which day it is: at a bucket's start, or at a process's first post.
        for _ in range(ENTRY_TRIES):
            result = await self._store_once(appid, token, logged, post, destinations)
            if isinstance(result, IngestResult):
                return result
            if isinstance(result, _OtherBucket):
                self._bucket_offset = result.bucket - dedup.bucket(result.now, self._window)
            else:
                self._entries.seen(result)
        raise EntryIdsTaken(f"the callback log of {appid} refused {ENTRY_TRIES} entry ids in a row")

    async def _store_once(
        self, appid: str, token: str, logged: bytes, post: Post, destinations: list[str]
    ) -> IngestResult | _OtherBucket | str:
        """One try of the ingest script; the log's last entry id when the proposed one was not above it."""
        marker, hsetex = await self._dedup_layout()
        now = self._clock()
        entry = self._entries.propose(now) if takes_entry_ids(appid) else ""
        delivery_id = from_entry(appid, entry) if entry else new_delivery_id()
        if entry:  # one hash: RQ's fields and the delivery's (svcgw.storage.keys.delivery)
            flat = self._job.lean(delivery_id)
        else:
            flat = self._job.flat(delivery_id, job_description(post.event_type, appid))
        # The further destinations' deliveries (svcgw.intake.fanout), named by the post as the primary's is
        # (else dlv_ ones): their keys go before the de-duplication window's (which runs to the last
        # key), their arguments before the events (which run to the last argument); the job field
        # count tells how many there are.
        fan: FanOut | None = None
        if destinations:
            description = job_description(post.event_type, appid)
            fan = plan(
                self.keys,
                destinations,
                lambda i, named: self._job.lean(i) if named else self._job.flat(i, description),
                primary=delivery_id,
            )
        events: list[Any] = []
        for event in post.events:
            events.extend((event.raw, event.digest or b""))
        event_keys = [event.key for event in post.events if event.key is not None]
        current = dedup.bucket(now, self._window) + self._bucket_offset
        window = dedup.plan(self.keys, appid, event_keys, marker, now, self._window, hsetex=hsetex, current=current)
        head = build_envelope(appid, post.event_type, [])[:-2]  # up to and including '['
        result = cast(
            list[Any],
            await self._run_script(
                keys=[
                    self.keys.receiver_lookup(digest(token)),
                    self.keys.instance(appid),
                    self.keys.callback_log(appid),
                    self.keys.delivery(delivery_id),
                    self.keys.rq.job(delivery_id),
                    self._queue_key,
                    self.keys.rq.queues,
                    *(fan.keys if fan else ()),
                    *window.keys,
                ],
                args=[
                    appid,
                    repr(now),
                    self.settings.log_retention,
                    logged,
                    post.event_type,
                    head,
                    window.mode,
                    window.expiry,
                    "" if window.bucket is None else window.bucket,
                    delivery_id,
                    self._queue_key,
                    f"{len(flat) // 2} {len(fan.deliveries)}" if fan else len(flat) // 2,
                    entry,
                    *flat,
                    *(fan.args if fan else ()),
                    *events,
                ],
            ),
        )
        if int(result[0]) == ENTRY_TAKEN:
            return _text(result[1])
        if int(result[0]) == OTHER_BUCKET:
            return _OtherBucket(int(result[1]), now)
        status, accepted, duplicates = (int(x) for x in result)
        if status < 0:
            raise UnknownReceiver(appid)
        self.counts.add(ingest_commands(self.keys, accepted, duplicates))
        if not accepted:
            return IngestResult(accepted, duplicates, None)
        return IngestResult(accepted, duplicates, delivery_id, fan.deliveries if fan else ())


@dataclass(frozen=True)
class _OtherBucket:
    """The script's answer when Redis's clock gives another de-duplication bucket than the one named."""

    bucket: int
    now: float  # this clock's time of the try


def _text(value: bytes | str | int) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
