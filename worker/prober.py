"""The liveness prober: every maintained instance, once per ``SVCGW_PROBE_INTERVAL``.

The schedule lives only in Redis, in the sorted set ``svcgw:probe:schedule``
(appid scored by the time its next probe is due), so any number of workers
share it and a restart of all of them loses nothing. A claim reads the
schedule's due members (one ``ZRANGE``, no more when none is due), then one
Lua script (``svcgw/storage/lua/probe_claim.lua``), given their instance hashes as
KEYS, claims those still due, atomically; a member another worker claimed
in between is skipped:

* an instance no longer maintained (stopped, logged out, offline with
  manual) leaves the schedule;
* an instance whose previous probe still holds its lease (the ``probing``
  field of the instance hash) is looked at again a moment later, so one
  instance never has two probes at once;
* every other due instance gets its next due time in the same script, the
  old one plus whole intervals, keeping the random offset ``mark_started``
  gave it, so instances stay spread over the interval, and a lease that
  expires on its own if the worker dies mid-probe.

A probe decides whether the connection is usable with a business read
(``PROBE_READ``): ``long/check`` alone proves nothing, since it can answer 0
on a closed connection. A failed read within the warm-up after a
connection-related call (``long/start``, a reconnect) is retried with
backoff while ``long/check`` still says the connection is being built. On a
loss the prober reconnects with the caller's last proxy, then judges with the
read again; only if that fails is the instance offline (``InstanceOffline``,
relogin). A loss the prober found by itself waits ``GAP_GRACE_SECONDS`` before
it is reported: a ``GapClosed`` saying the login is gone (-11002, -1008)
often arrives just after the drop, and then the caller must hear that a scan
is needed (manual), not relogin. State flips and their events are
``svcgw.liveness.transitions.go_offline`` and ``go_online``. When the capability layer
itself cannot be reached, a probe decides nothing: the upstream being down
says nothing about the instance.

What the observations mean is :func:`worker.probe.decide`, a pure function;
this module does the I/O it asks for. Probes run as asyncio tasks on the
worker's event loop, at most ``POOL_SIZE`` at once; the capability layer is
called through :class:`svcgw.upstream.Upstream`.

Errors: an :class:`svcgw.upstream.UpstreamError` (no answer, not HTTP 200,
or an answer without an integer ``code``) ends a probe undecided, with the
reason in the instance's ``probe_error``; Redis errors end a probe without a
decision, and its lease then runs out. On shutdown, probes waiting out a
warm-up or a grace stop at once and hand their claims back
(:class:`Abandoned`); one blocked in a call gets ``SHUTDOWN_GRACE`` seconds,
then is cancelled and its claim handed back for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

import orjson
from redis.asyncio import Redis

from svcgw.config.settings import Settings
from svcgw.counters import record_probe
from svcgw.errors import STORAGE_ERRORS, Failure, SvcgwError
from svcgw.liveness import transitions
from svcgw.logs import of_shard
from svcgw.storage.keys import KeySpace
from svcgw.storage.scripts import register
from svcgw.upstream import Answer, Upstream, UpstreamError

from .idlepace import empty_schedule_pause
from .probe import AwaitGap, Done, Facts, GoOffline, GoOnline, Judgement, Read, Reconnect, Recover, Step, decide

__all__ = ["PROBE_READ", "Abandoned", "Claim", "Prober", "serve"]

log = logging.getLogger("svcgw.prober")

PROBE_READ = "user/getProfile"  # cheap business read: code 0 only on a usable connection
CHECK = "long/check"
RECONNECT = "login/reconnect"

HTTP_TIMEOUT = 5.0
LEASE_SECONDS = 60.0  # longer than the slowest probe: every call timing out
POOL_SIZE = 32
MIN_TICK = 0.05  # batches the claims of a large schedule
MAX_IDLE = 0.25  # how soon a probe asked for at once (GapClosed, long/start) is seen
SHUTDOWN_GRACE = 3.0
GAP_GRACE_SECONDS = 2.0  # how long a fresh loss waits for a GapClosed that explains it
# Due members a claim reads and names, per probe it may claim: workers that read the schedule at
# the same moment read the same members, and the extra ones leave the later claim something to take.
CANDIDATES = 2

# The instance fields a claim returns, in the order of the claim script's HMGET.
CLAIM_FIELDS = ("status", "since", "proxy", "offline_since", "gap_code", "gap_message", "gap_at")


class Abandoned(SvcgwError):
    """The worker is stopping; the probe gives its claim back undecided."""


class _Unavailable(Failure):
    """The capability layer could not be asked; the message names the operation."""


@dataclass(frozen=True)
class Claim:
    appid: str
    lease: str
    fields: dict[str, str | None]

    def get(self, name: str) -> str | None:
        return self.fields.get(name)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _float(value: str | None, default: float = 0.0) -> float:
    try:
        return float(value) if value else default
    except ValueError:
        return default


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def facts_of(claim: Claim, started: float) -> Facts:
    """What a probe knows when it starts: the instance's fields as claimed."""
    status = claim.get("status")
    gap = _int(claim.get("gap_code"))
    return Facts(
        status=status,
        owes_recovery=status == transitions.ONLINE and bool(claim.get("offline_since")),
        since=_float(claim.get("since")),
        gap=None if gap is None else (gap, claim.get("gap_message") or ""),
        gap_at=_float(claim.get("gap_at"), started) if gap is not None else None,
        started=started,
    )


def _why(answer: Answer) -> str:
    return answer.message or f"code {answer.code}"


class Prober:
    """Claims due probes and runs them; ``redis`` is a ``redis.asyncio`` client (bytes or text)."""

    def __init__(
        self,
        settings: Settings,
        redis: Redis,
        keys: KeySpace,
        upstream: Upstream,
        *,
        pool_size: int = POOL_SIZE,
        clock: Callable[[], float] = time.time,
        shard: int | None = None,
    ) -> None:
        self.settings = settings
        # The shard it probes for, named in its log lines when the worker has several (None: one).
        self.log = of_shard(log, shard)
        self.redis = redis
        self.keys = keys
        self.upstream = upstream
        self.pool_size = pool_size
        self.clock = clock
        self.interval = settings.probe_interval
        # A Cluster's sixteen probers, their schedules empty, look less often (worker.idlepace).
        self.empty_pause = empty_schedule_pause(cluster=settings.shard_layout.cluster, busy_pause=MAX_IDLE)
        self._claim = register(redis, "probe_claim")
        self._finish = register(redis, "probe_finish")
        self._release = register(redis, "probe_release")
        self._stop = asyncio.Event()

    # --- the schedule ---------------------------------------------------------------
    async def claim(self, limit: int) -> tuple[list[Claim], float | None]:
        """Claim up to ``limit`` due probes; returns them and when the next one is due."""
        if limit <= 0:
            return [], None
        now = self.clock()
        # The schedule's first members in score order: the due ones among them are what the
        # script may claim (it touches only the instance hashes named in its KEYS), and when
        # none is due, the first one says when to look again, with no script call.
        schedule = await self.redis.zrange(self.keys.probe_schedule, 0, CANDIDATES * limit - 1, withscores=True)
        first = cast(list[tuple[Any, float]], schedule)
        due = [member for member, score in first if score <= now]
        if not due:
            return [], (first[0][1] if first else None)
        lease = repr(now + LEASE_SECONDS)
        head, flat = cast(
            list[Any],
            await self._claim(
                keys=[self.keys.probe_schedule, *(self.keys.instance(_text(member) or "") for member in due)],
                args=[repr(now), limit, repr(self.interval), lease, min(self.interval, 1.0), *due],
            ),
        )
        width = 1 + len(CLAIM_FIELDS)
        claims = [
            Claim(
                _text(flat[i]) or "",
                lease,
                dict(zip(CLAIM_FIELDS, (_text(v) for v in flat[i + 1 : i + width]), strict=True)),
            )
            for i in range(0, len(flat), width)
        ]
        return claims, (float(head) if head else None)

    async def finish(self, claim: Claim, *, seen: bool, error: str = "") -> None:
        await self._finish(
            keys=[self.keys.instance(claim.appid), self.keys.metrics_instances, self.keys.instances],
            args=[claim.lease, repr(self.clock()), "1" if seen else "0", claim.get("gap_at") or "", error, claim.appid],
        )

    async def release(self, claim: Claim) -> None:
        await self._release(
            keys=[self.keys.instance(claim.appid), self.keys.probe_schedule],
            args=[claim.lease, repr(self.clock()), claim.appid],
        )

    # --- one probe --------------------------------------------------------------------
    async def probe(self, claim: Claim) -> str:
        """Probe one claimed instance and record the outcome; returns its name (for logs and tests)."""
        facts = facts_of(claim, self.clock())
        step: Step = decide(facts)
        while not isinstance(step, Done):
            facts = await self._perform(step, claim, facts)
            step = decide(facts)
        if facts.unavailable is not None:
            self.log.warning("probe undecided: %s", facts.unavailable, extra={"appid": claim.appid})
        if isinstance(step.flip, GoOnline):
            await transitions.go_online(
                self.redis,
                self.keys,
                self.settings,
                claim.appid,
                auto_reconnected=step.flip.auto_reconnected,
                at=step.flip.at,
            )
        elif isinstance(step.flip, GoOffline):
            await transitions.go_offline(
                self.redis,
                self.keys,
                self.settings,
                claim.appid,
                reason=step.flip.reason,
                action_required=step.flip.action_required,
                detected_at=step.flip.detected_at,
            )
        await self.finish(claim, seen=step.seen, error=step.error)
        return step.outcome

    async def _perform(self, step: Recover | Read | Reconnect | AwaitGap, claim: Claim, facts: Facts) -> Facts:
        """Do what ``step`` asks and return the facts with its observation added."""
        appid = claim.appid
        if isinstance(step, Recover):
            # Back through long/start after an InstanceOffline: the recovery is owed first.
            await transitions.go_online(self.redis, self.keys, self.settings, appid, auto_reconnected=False, at=step.at)
            return replace(facts, recovered=True)
        if isinstance(step, AwaitGap):
            await self._sleep(GAP_GRACE_SECONDS)
            code, message = await self.redis.hmget(self.keys.instance(appid), ["gap_code", "gap_message"])
            gap = _int(_text(code))
            late = None if gap is None else (gap, _text(message) or "")
            return replace(facts, looked_for_gap=True, late_gap=late)
        try:
            if isinstance(step, Read):
                judgement = await self.confirm(appid, step.warm_until)
                return replace(facts, second=judgement) if step.after_reconnect else replace(facts, first=judgement)
            answer = await self._call(RECONNECT, appid, proxy=claim.get("proxy") or "")
            return replace(facts, reconnect=Judgement(answer.ok, "" if answer.ok else _why(answer), self.clock()))
        except _Unavailable as exc:
            return replace(facts, unavailable=str(exc))

    async def confirm(self, appid: str, warm_until: float) -> Judgement:
        """Whether a business read succeeds, allowing for a connection still being built until ``warm_until``."""
        delay = 0.2
        while True:
            read = await self._call(PROBE_READ, appid)
            now = self.clock()
            if read.ok:
                return Judgement(True, at=now)
            if now >= warm_until:
                return Judgement(False, _why(read), now)
            if (await self._call(CHECK, appid)).ok:
                # Built, yet the read fails: this is no warm-up.
                return Judgement(False, _why(read), now)
            await self._sleep(min(delay, max(warm_until - now, 0.01)))
            delay = min(delay * 2, 1.0)

    async def _call(self, operation: str, appid: str, **fields: str) -> Answer:
        module, action = operation.split("/")
        try:
            return await self.upstream.call(module, action, orjson.dumps({"appid": appid, **fields}))
        except UpstreamError as exc:
            text = str(exc)
            raise _Unavailable(text if text.startswith(operation) else f"{operation}: {text}") from exc

    async def _sleep(self, seconds: float) -> None:
        """Wait ``seconds``; :class:`Abandoned` if the prober stops meanwhile."""
        if await self._pause(seconds):
            raise Abandoned

    async def _pause(self, seconds: float) -> bool:
        """Wait ``seconds`` or until the prober stops; True if it stops."""
        if self._stop.is_set():
            return True
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except TimeoutError:
            return False
        return True

    async def _run_probe(self, claim: Claim) -> None:
        try:
            outcome = await self.probe(claim)
            self.log.debug("probe %s", outcome, extra={"appid": claim.appid, "outcome": outcome})
            await record_probe(self.redis, self.keys, outcome)
        except Abandoned:
            await self._give_back(claim)
        except STORAGE_ERRORS as exc:
            self.log.warning("probe aborted: redis unavailable (%s)", type(exc).__name__, extra={"appid": claim.appid})
        except Exception:
            # The lease runs out and a later round probes the instance again.
            self.log.exception("probe failed", extra={"appid": claim.appid})

    async def _give_back(self, claim: Claim) -> None:
        try:
            await self.release(claim)
        except STORAGE_ERRORS:
            self.log.warning("could not hand back a probe; its lease will expire", extra={"appid": claim.appid})

    # --- main loop ----------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Probe until ``stop`` is set; probes in flight are given a moment, then handed back."""
        self._stop = stop
        self.log.info("prober started: every %.3gs, up to %d probes at once", self.interval, self.pool_size)
        running: dict[asyncio.Task[None], Claim] = {}
        failures = 0
        while not stop.is_set():
            try:
                claims, next_due = await self.claim(self.pool_size - len(running))
                failures = 0
            except STORAGE_ERRORS as exc:
                failures += 1
                delay = min(0.1 * 2**failures, 5.0)
                self.log.warning("redis unavailable (%s); retrying in %.1fs", type(exc).__name__, delay)
                await self._pause(delay)
                continue
            except Exception:
                failures += 1
                self.log.exception("claiming probes failed")
                await self._pause(min(0.1 * 2**failures, 5.0))
                continue
            for claim in claims:
                task = asyncio.create_task(self._run_probe(claim), name=f"probe-{claim.appid}")
                running[task] = claim
                task.add_done_callback(lambda done: running.pop(done, None))
            pause = self.empty_pause if next_due is None else min(max(next_due - self.clock(), MIN_TICK), MAX_IDLE)
            if len(running) >= self.pool_size:
                await asyncio.wait(set(running), timeout=pause, return_when=asyncio.FIRST_COMPLETED)
            else:
                await self._pause(pause)
        # Probes waiting out a warm-up stop at once (stop is set); one blocked
        # in an HTTP call gets until the grace ends, then its claim is handed back for it.
        if running:
            _, pending = await asyncio.wait(set(running), timeout=SHUTDOWN_GRACE)
            left = [running[task] for task in pending if task in running]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for claim in left:
                await self._give_back(claim)
        self.log.info("prober stopped")


async def serve(
    settings: Settings, redis: Redis, keys: KeySpace, stop: asyncio.Event, *, shard: int | None = None
) -> None:
    """The prober of this worker (of ``shard``, of several), on the running loop, until ``stop`` is set.

    Without ``SVCGW_UPSTREAM_URL`` there is nothing to probe with, and it
    returns at once. An error that ends the prober is logged; deliveries go on.
    """
    logger = of_shard(log, shard)
    if not settings.upstream_url:
        logger.info("no SVCGW_UPSTREAM_URL: the liveness prober is not running in this worker")
        return
    # Probes wait less than gateway calls: a slow answer is as good as none for a liveness read.
    upstream = Upstream(
        settings.upstream_url,
        timeout=min(HTTP_TIMEOUT, settings.upstream_timeout),
        connect_timeout=settings.upstream_connect_timeout,
    )
    try:
        await Prober(settings, redis, keys, upstream, shard=shard).run(stop)
    except Exception:
        logger.exception("the liveness prober stopped on an error")
    finally:
        await upstream.aclose()
