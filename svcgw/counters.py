"""The counters of ``/metrics``, recorded in Redis by every process.

``svcgw.views.metrics`` reads them back for a scrape, and ``receiver.metrics`` renders them.

Several processes produce the numbers: the HTTP server (posts received),
any number of ``svcgw worker`` processes (attempts, deliveries, dead
letters, probes), possibly on different hosts. The counters therefore live
in Redis, which every role already shares, rather than in per-process
memory:

* counters are fields of the hash ``svcgw:metrics:counters``, bumped with
  ``HINCRBY``; the latency histogram is the hash ``svcgw:metrics:latency``
  (one field per bucket, plus ``count`` and ``sum``);
* the receiver counts its posts in memory (``ingest_commands`` says
  which counters a post bumps) and a worker its attempts, and a task on
  each event loop writes them every half second, all in one pipeline, so
  neither the ingest script nor the delivery path does metrics I/O
  (:class:`BufferedCounts`, :class:`AttemptRecorder`). Counting in the
  ingest script cost two Redis commands per post;
* instances are counted by liveness status in the hash
  ``svcgw:metrics:instances``, updated in the same transaction as every
  status change (registration, ``svcgw.liveness.transitions`` and the prober; see
  :func:`count_change`), so a scrape never reads the instances themselves.
  Counts that do not exist yet (instances registered before they were kept)
  are computed once from the instances by the first scrape
  (``svcgw.views.metrics.rebuild_instance_counts``);
* a scrape reads these hashes and, live, the queue depth, the number of
  dead letters and of failing destinations (``svcgw.delivery.failingorigins``), and renders
  them with ``prometheus_client``.

prometheus-client's multiprocess mode was the alternative. It was not
chosen because it needs one directory shared by every process (so one
host), wiped at each start, and a server process that can read the
workers' files; Redis-backed counters work however the roles are spread,
survive restarts, and every server process answers the same totals.
Counters are never reset by the service; Prometheus handles a reset (a new
Redis) as it does any counter reset.

Recording never fails the caller: a Redis error while counting is logged
and the count is lost, never the post or the delivery.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from redis.asyncio import Redis as AsyncRedis

from svcgw.config.settings import Settings
from svcgw.errors import STORAGE_ERRORS
from svcgw.shards.connections import async_client
from svcgw.storage.keys import KeySpace
from svcgw.storage.scripts import add_to_transaction


class Received(Protocol):
    """What the recorder reads of a delivery: when its post was received (Unix seconds), and its kind
    (``primary``, or ``destination`` for a further destination's: :data:`KINDS`)."""

    @property
    def received_at(self) -> float: ...

    @property
    def kind(self) -> str: ...


__all__ = [
    "COUNTERS",
    "KINDED",
    "KINDS",
    "LATENCY_BUCKETS",
    "STRANDED",
    "AttemptRecorder",
    "BufferedCounts",
    "attempt_commands",
    "count_change",
    "ingest_commands",
    "kinded_series",
    "not_stored_commands",
    "record_probe",
]

log = logging.getLogger("svcgw.metrics")

# Seconds from receipt to a 2xx: first attempts land in the low buckets,
# retries (30 s ... 6 h later) in the high ones.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    150.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
    7200.0,
    21600.0,
    43200.0,
    86400.0,
)

# Counter fields of ``svcgw:metrics:counters``: (metric, label name or None).
POSTS = "posts_received"
EVENTS = "events_received"
DUPLICATES = "duplicates_dropped"
POSTS_NOT_STORED = "posts_not_stored"
ATTEMPTS = "delivery_attempts"
DELIVERIES = "deliveries"
DEAD = "dead_letters"
PROBES = "probes"
STRANDED = "deliveries_stranded"

COUNTERS: dict[str, tuple[str, str | None]] = {
    POSTS: ("Posts accepted by the receiver (stored, answered 2xx).", None),
    EVENTS: ("Events in accepted posts, new and duplicate.", None),
    DUPLICATES: ("Events dropped from forwarding as duplicates.", None),
    POSTS_NOT_STORED: ("Posts answered 503 because Redis did not store them, by cause (the error's class).", "cause"),
    ATTEMPTS: (
        "Delivery attempts, by what came next (delivered, retry, dead) and kind (primary, destination).",
        "outcome",
    ),
    DELIVERIES: ("Deliveries finished, by outcome (delivered, dead) and kind (primary, destination).", "outcome"),
    DEAD: (
        "Deliveries that became dead letters (retries exhausted, or a replay failed), by kind (primary, destination).",
        None,
    ),
    PROBES: ("Liveness probes, by result.", "result"),
    STRANDED: (
        "Deliveries a worker held past their lease and longest attempt without finishing them, handed back "
        "(svcgw.delivery.stranded).",
        None,
    ),
}
# The delivery counters carry one more label, ``kind``: ``primary`` (the primary address: the
# instance's callback address or the account default) or ``destination`` (a further destination,
# docs/destinations.md). A primary's field is named as before kinds were counted, so its series goes
# on from the same count; a further destination's field ends in ``|destination``.
KINDS = ("primary", "destination")
KINDED = frozenset({ATTEMPTS, DELIVERIES, DEAD})

Command = tuple[str, str, str, float]  # (HINCRBY | HINCRBYFLOAT, key, field, amount)


def _field(metric: str, label: str | None = None, kind: str = "primary") -> str:
    name = metric if label is None else f"{metric}|{label}"
    return name if kind == "primary" else f"{name}|{kind}"


def kinded_series(metric: str, labelled: bool, counters: dict[str, float]) -> dict[tuple[str, ...], float]:
    """The values of a delivery counter (:data:`KINDED`) from the counters' fields, by (label value, kind) when
    ``labelled``, else by (kind,); each kind present for an unlabelled one."""
    series: dict[tuple[str, ...], float] = {} if labelled else {(kind,): 0.0 for kind in KINDS}
    for name, value in counters.items():
        if name != metric and not name.startswith(metric + "|"):
            continue
        parts = name.split("|")[1:]
        if labelled:
            if not parts:
                continue
            key: tuple[str, ...] = (parts[0], parts[1] if len(parts) > 1 else "primary")
        else:
            key = (parts[0] if parts else "primary",)
        series[key] = series.get(key, 0.0) + value
    return series


def _bucket(seconds: float) -> str:
    for bound in LATENCY_BUCKETS:
        if seconds <= bound:
            return repr(bound)
    return "+Inf"


# --- recording ------------------------------------------------------------------
def ingest_commands(keys: KeySpace, accepted: int, duplicates: int) -> list[Command]:
    counters = keys.metrics_counters
    commands: list[Command] = [("HINCRBY", counters, POSTS, 1)]
    if accepted + duplicates:
        commands.append(("HINCRBY", counters, EVENTS, accepted + duplicates))
    if duplicates:
        commands.append(("HINCRBY", counters, DUPLICATES, duplicates))
    return commands


def not_stored_commands(keys: KeySpace, cause: str) -> list[Command]:
    """What a post refused for a storage error adds; ``cause`` is the error's class name."""
    return [("HINCRBY", keys.metrics_counters, _field(POSTS_NOT_STORED, cause), 1)]


def attempt_commands(
    keys: KeySpace, step: str, *, received_at: float, now: float | None = None, kind: str = "primary"
) -> list[Command]:
    """What one finished attempt adds: ``step`` is the engine's delivered / retry / dead; ``kind`` (:data:`KINDS`)
    whether it went to the primary address or a further destination."""
    counters = keys.metrics_counters
    commands: list[Command] = [("HINCRBY", counters, _field(ATTEMPTS, step, kind), 1)]
    if step == "delivered":
        commands.append(("HINCRBY", counters, _field(DELIVERIES, "delivered", kind), 1))
        if received_at > 0:
            commands += _latency_commands(keys, max((now if now is not None else time.time()) - received_at, 0.0))
    elif step == "dead":
        commands.append(("HINCRBY", counters, _field(DELIVERIES, "dead", kind), 1))
        commands.append(("HINCRBY", counters, _field(DEAD, None, kind), 1))
    return commands


def _latency_commands(keys: KeySpace, latency: float) -> list[Command]:
    """What a delivered delivery's time from its post to its delivery adds."""
    return [
        ("HINCRBY", keys.metrics_latency, _bucket(latency), 1),
        ("HINCRBY", keys.metrics_latency, "count", 1),
        ("HINCRBYFLOAT", keys.metrics_latency, "sum", latency),
    ]


def _queue(pipe: Any, commands: Iterable[Command]) -> None:
    for command, key, name, amount in commands:
        if command == "HINCRBYFLOAT":
            pipe.hincrbyfloat(key, name, amount)
        else:
            pipe.hincrby(key, name, int(amount))


async def _apply(redis: AsyncRedis, commands: Sequence[Command]) -> None:
    try:
        async with redis.pipeline(transaction=False) as pipe:
            _queue(pipe, commands)
            await pipe.execute()
    except STORAGE_ERRORS as exc:
        log.warning("metrics not recorded: %s", type(exc).__name__)


class BufferedCounts:
    """Counts added in memory and written to Redis every :attr:`flush_every` seconds, in one pipeline.

    For counts bumped on a hot path (each post, each attempt): :meth:`add`
    does no I/O. A task on the event loop, started by the first count, writes
    what is held; :meth:`aclose` stops it after a last write. A flush that
    fails keeps its counts for the next one. What a process held when it was
    killed (at most half a second of counts) is lost, never a post or a
    delivery.

    ``redis`` is a ``redis.asyncio`` client; without one the buffer opens
    its own from ``settings`` when it first writes, and closes it in
    :meth:`aclose`.
    """

    flush_every = 0.5

    def __init__(self, settings: Settings, keys: KeySpace, redis: AsyncRedis | None = None) -> None:
        self.settings = settings
        self.keys = keys
        self._given_redis = redis
        self._redis: AsyncRedis | None = redis
        self._pending: dict[tuple[str, str, str], float] = {}
        self._task: asyncio.Task[None] | None = None
        self._closing: asyncio.Event | None = None

    def lend(self, redis: AsyncRedis) -> None:
        """Write with ``redis`` from now on (not closed here), unless a client of its own is open already.

        A Cluster client costs a reading of Redis's command table and connections of its own: a delivery
        engine lends its recorder the client it claims with rather than have it open another.
        """
        if self._redis is None:
            self._redis = self._given_redis = redis

    def add(self, commands: Iterable[Command]) -> None:
        for command, key, name, amount in commands:
            slot = (command, key, name)
            self._pending[slot] = self._pending.get(slot, 0) + amount
        if self._task is None:
            self._closing = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(self._closing), name="metrics-flush")

    async def _run(self, closing: asyncio.Event) -> None:
        while not closing.is_set():
            try:
                await asyncio.wait_for(closing.wait(), self.flush_every)
            except TimeoutError:
                pass
            await self.flush()

    async def flush(self) -> None:
        """Write the counts held now, in one pipeline."""
        pending, self._pending = self._pending, {}
        if not pending:
            return
        try:
            if self._redis is None:
                self._redis = async_client(self.settings)
            async with self._redis.pipeline(transaction=False) as pipe:
                _queue(pipe, [(command, key, name, amount) for (command, key, name), amount in pending.items()])
                await pipe.execute()
        except STORAGE_ERRORS as exc:
            log.warning("metrics not recorded yet: %s", type(exc).__name__)
            for slot, amount in pending.items():
                self._pending[slot] = self._pending.get(slot, 0) + amount

    async def aclose(self) -> None:
        """Stop the flushing task once it has written what is held; close the client this recorder opened."""
        task, closing = self._task, self._closing
        self._task = self._closing = None
        if task is not None and closing is not None:
            closing.set()
            await asyncio.gather(task, return_exceptions=True)
        await self.flush()
        if self._given_redis is None and self._redis is not None:
            redis, self._redis = self._redis, None
            await redis.aclose()


class AttemptRecorder(BufferedCounts):
    """The delivery engine's ``on_attempt`` hook: each finished attempt's counts, buffered."""

    def __init__(self, settings: Settings, keys: KeySpace, redis: AsyncRedis | None = None) -> None:
        super().__init__(settings, keys, redis)
        # An attempt's counts but its latency are the same for each step and kind: made once.
        self._counts: dict[tuple[str, str], list[Command]] = {}

    def __call__(self, prepared: Received, attempt: object, step: str) -> None:
        kind = prepared.kind
        counts = self._counts.get((step, kind))
        if counts is None:
            counts = self._counts[step, kind] = attempt_commands(self.keys, step, received_at=0.0, kind=kind)
        self.add(counts)
        if step == "delivered" and prepared.received_at > 0:
            self.add(_latency_commands(self.keys, max(time.time() - prepared.received_at, 0.0)))


async def record_probe(redis: AsyncRedis, keys: KeySpace, result: str) -> None:
    """One liveness probe's result (e.g. online, reconnected, offline, undecided)."""
    await _apply(redis, [("HINCRBY", keys.metrics_counters, _field(PROBES, result), 1)])


# --- instance counts -----------------------------------------------------------------
ProbeErrorChange = str  # "set", "clear" or "" (unchanged)


def count_change(
    pipe: Any, keys: KeySpace, appid: str, *, status: str = "", probe_error: ProbeErrorChange = ""
) -> None:
    """Queue the instance-count update for a change of ``appid`` on the transaction ``pipe``.

    Queue it *before* the write that makes the change: the script reads the
    instance's current status and ``probe_error`` when the transaction runs.
    ``status`` is the new status ("" when it does not change).
    """
    add_to_transaction(
        pipe,
        "liveness_count",
        keys=(keys.instance(appid), keys.metrics_instances, keys.instances),
        args=(appid, status, probe_error),
    )
