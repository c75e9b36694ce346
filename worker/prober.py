"""The liveness prober: every maintained instance, once per ``SVCGW_PROBE_INTERVAL``.

The schedule lives only in Redis, in the sorted set ``svcgw:probe:schedule``
(appid scored by the time its next probe is due), so any number of workers
share it and a restart of all of them loses nothing. One Lua script claims
what is due, atomically:

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
``svcgw.liveness.go_offline`` and ``go_online``. When the capability layer
itself cannot be reached, a probe decides nothing: the upstream being down
says nothing about the instance.

Errors: ``UpstreamUnavailable`` (transport failure, non-200, or an answer
without an integer ``code``) is the one error the HTTP calls raise; Redis
errors end a probe without a decision, and its lease then runs out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, cast

import httpx
import orjson
from redis.exceptions import RedisError

from svcgw import keys, liveness
from svcgw.connections import sync_client
from svcgw.events import MANUAL, RELOGIN
from svcgw.metrics import record_probe
from svcgw.settings import Settings

__all__ = [
    "PROBE_READ",
    "Answer",
    "Claim",
    "Prober",
    "Upstream",
    "UpstreamUnavailable",
    "start_prober",
]

log = logging.getLogger("svcgw.prober")

PROBE_READ = "user/getProfile"  # cheap business read: code 0 only on a usable connection
CHECK = "long/check"
RECONNECT = "login/reconnect"

WARMUP_SECONDS = 4.0  # spec: long/check answers non-zero for about 3 s after a connection call
HTTP_TIMEOUT = 5.0
LEASE_SECONDS = 60.0  # longer than the slowest probe: every call timing out
POOL_SIZE = 32
MIN_TICK = 0.05  # batches the claims of a large schedule
MAX_IDLE = 0.25  # how soon a probe asked for at once (GapClosed, long/start) is seen
SHUTDOWN_GRACE = 3.0
GAP_GRACE_SECONDS = 2.0  # how long a fresh loss waits for a GapClosed that explains it

# The instance fields a claim returns, in the order of the claim script's HMGET.
CLAIM_FIELDS = ("status", "since", "proxy", "offline_since", "gap_code", "gap_message", "gap_at")

# KEYS[1]: schedule. ARGV: now, limit, interval, lease (expiry, also the claim's
# token), instance key prefix, retry delay for an instance still being probed.
# Returns {score of the next due member or false, {appid, fields..., appid, ...}}.
_CLAIM = """
local now = tonumber(ARGV[1])
local interval = tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local claimed = {}
for i = 1, #due, 2 do
  local appid, score = due[i], tonumber(due[i + 1])
  local key = ARGV[5] .. appid
  local f = redis.call('HMGET', key, 'maintained', 'probing',
    'status', 'since', 'proxy', 'offline_since', 'gap_code', 'gap_message', 'gap_at')
  if f[1] ~= '1' then
    redis.call('ZREM', KEYS[1], appid)
  elseif f[2] and tonumber(f[2]) > now then
    redis.call('ZADD', KEYS[1], math.min(tonumber(f[2]), now + tonumber(ARGV[6])), appid)
  else
    local following = score + interval * (math.floor((now - score) / interval) + 1)
    redis.call('ZADD', KEYS[1], following, appid)
    redis.call('HSET', key, 'probing', ARGV[4], 'next_probe', following)
    claimed[#claimed + 1] = appid
    for j = 3, #f do claimed[#claimed + 1] = f[j] end
  end
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {head[2] or false, claimed}
"""

# KEYS: instance. ARGV: lease, probe time, seen ('1'/'0'), gap_at handled, probe error.
_FINISH = """
if redis.call('HGET', KEYS[1], 'probing') == ARGV[1] then redis.call('HDEL', KEYS[1], 'probing') end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'last_probe', ARGV[2], 'last_seen', ARGV[2])
else
  redis.call('HSET', KEYS[1], 'last_probe', ARGV[2])
end
if ARGV[5] == '' then
  redis.call('HDEL', KEYS[1], 'probe_error')
else
  redis.call('HSET', KEYS[1], 'probe_error', ARGV[5])
end
if ARGV[4] ~= '' and redis.call('HGET', KEYS[1], 'gap_at') == ARGV[4] then
  redis.call('HDEL', KEYS[1], 'gap_code', 'gap_message', 'gap_at', 'gap_manual')
end
return 1
"""

# A probe given up (shutdown): the lease goes and the probe is due again now.
# KEYS: instance, schedule. ARGV: lease, now, appid.
_RELEASE = """
if redis.call('HGET', KEYS[1], 'probing') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'probing')
redis.call('ZADD', KEYS[2], 'XX', 'LT', ARGV[2], ARGV[3])
return 1
"""


class UpstreamUnavailable(Exception):
    """The capability layer could not be asked: no answer, not HTTP 200, or not an envelope."""


class Abandoned(Exception):
    """The worker is stopping; the probe gives its claim back undecided."""


@dataclass(frozen=True)
class Answer:
    code: int
    message: str

    @property
    def ok(self) -> bool:
        return self.code == 0


class Upstream:
    """The capability layer's operations, as the gateway calls them: POST {base}/svc/api/{module}/{action}."""

    def __init__(self, base_url: str, client: httpx.Client) -> None:
        self.base = base_url.rstrip("/")
        self.client = client

    def call(self, operation: str, appid: str, **fields: Any) -> Answer:
        url = f"{self.base}/svc/api/{operation}"
        try:
            response = self.client.post(
                url, content=orjson.dumps({"appid": appid, **fields}), headers={"Content-Type": "application/json"}
            )
        except httpx.HTTPError as exc:
            raise UpstreamUnavailable(f"{operation}: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise UpstreamUnavailable(f"{operation}: HTTP {response.status_code}")
        try:
            envelope = orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise UpstreamUnavailable(f"{operation}: the answer is not JSON") from exc
        code = envelope.get("code") if isinstance(envelope, dict) else None
        if not isinstance(code, int) or isinstance(code, bool):
            raise UpstreamUnavailable(f"{operation}: the answer has no code")
        message = envelope.get("message")
        return Answer(code, message if isinstance(message, str) else "")


@dataclass(frozen=True)
class Claim:
    appid: str
    lease: str
    fields: dict[str, str | None]

    def get(self, name: str) -> str | None:
        return self.fields.get(name)


@dataclass(frozen=True)
class Verdict:
    usable: bool
    message: str = ""


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


class Prober:
    def __init__(
        self,
        settings: Settings,
        redis: Any,
        upstream: Upstream,
        *,
        pool_size: int = POOL_SIZE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # ``redis`` must be created with decode_responses=True.
        self.settings = settings
        self.redis = redis
        self.upstream = upstream
        self.pool_size = pool_size
        self.clock = clock
        self.interval = settings.probe_interval
        self._claim = redis.register_script(_CLAIM)
        self._finish = redis.register_script(_FINISH)
        self._release = redis.register_script(_RELEASE)
        self._stop = threading.Event()

    # --- the schedule ---------------------------------------------------------------
    def claim(self, limit: int) -> tuple[list[Claim], float | None]:
        """Claim up to ``limit`` due probes; returns them and when the next one is due."""
        if limit <= 0:
            return [], None
        now = self.clock()
        lease = repr(now + LEASE_SECONDS)
        head, flat = cast(
            list[Any],
            self._claim(
                keys=[keys.PROBE_SCHEDULE],
                args=[repr(now), limit, repr(self.interval), lease, keys.instance(""), min(self.interval, 1.0)],
            ),
        )
        width = 1 + len(CLAIM_FIELDS)
        claims = [
            Claim(flat[i], lease, dict(zip(CLAIM_FIELDS, flat[i + 1 : i + width], strict=True)))
            for i in range(0, len(flat), width)
        ]
        return claims, (float(head) if head else None)

    def finish(self, claim: Claim, *, seen: bool, error: str = "") -> None:
        self._finish(
            keys=[keys.instance(claim.appid)],
            args=[claim.lease, repr(self.clock()), "1" if seen else "0", claim.get("gap_at") or "", error],
        )

    def release(self, claim: Claim) -> None:
        self._release(
            keys=[keys.instance(claim.appid), keys.PROBE_SCHEDULE], args=[claim.lease, repr(self.clock()), claim.appid]
        )

    # --- one probe --------------------------------------------------------------------
    def probe(self, claim: Claim) -> str:
        """Probe one claimed instance and record the outcome; returns its name (for logs and tests)."""
        appid = claim.appid
        started = self.clock()
        status = claim.get("status")
        if status == liveness.ONLINE and claim.get("offline_since"):
            # Back through long/start after an InstanceOffline: the recovery is owed first.
            liveness.go_online(self.redis, self.settings, appid, auto_reconnected=False, at=started)
        gap = _int(claim.get("gap_code"))
        gap_message = claim.get("gap_message") or ""
        if gap is not None and gap in liveness.MANUAL_GAP_CODES:
            liveness.go_offline(
                self.redis,
                self.settings,
                appid,
                reason=liveness.gap_reason(gap, gap_message),
                action_required=MANUAL,
                detected_at=_float(claim.get("gap_at"), started),
            )
            self.finish(claim, seen=False)
            return "manual"
        try:
            # A connection call by the caller (long/start) is the start of a warm-up too.
            since = _float(claim.get("since"))
            warm_until = since + WARMUP_SECONDS if status == liveness.ONLINE else 0.0
            first = self.confirm(appid, warm_until)
            if first.usable:
                if status == liveness.OFFLINE:
                    liveness.go_online(self.redis, self.settings, appid, auto_reconnected=False, at=self.clock())
                self.finish(claim, seen=True)
                return "online"
            detected_at = _float(claim.get("gap_at"), started) if gap is not None else started
            answer = self.upstream.call(RECONNECT, appid, proxy=claim.get("proxy") or "")
            if answer.ok:
                second = self.confirm(appid, self.clock() + WARMUP_SECONDS)
            else:
                second = Verdict(False, answer.message or f"code {answer.code}")
        except UpstreamUnavailable as exc:
            log.warning("probe undecided: %s", exc, extra={"appid": appid})
            self.finish(claim, seen=False, error=f"capability layer unavailable ({exc})")
            return "undecided"
        if second.usable:
            if status == liveness.OFFLINE:
                liveness.go_online(self.redis, self.settings, appid, auto_reconnected=True, at=self.clock())
            self.finish(claim, seen=True)
            return "reconnected"
        if status == liveness.ONLINE and gap is None:
            # A GapClosed explaining the loss may be on its way; if it says the
            # login is gone, the caller must be told a scan is needed.
            if self._stop.wait(GAP_GRACE_SECONDS):
                raise Abandoned
            code, message = self.redis.hmget(keys.instance(appid), ["gap_code", "gap_message"])
            gap_now = _int(code)
            if gap_now is not None and gap_now in liveness.MANUAL_GAP_CODES:
                liveness.go_offline(
                    self.redis,
                    self.settings,
                    appid,
                    reason=liveness.gap_reason(gap_now, message or ""),
                    action_required=MANUAL,
                    detected_at=detected_at,
                )
                self.finish(claim, seen=False)
                return "manual"
        cause = liveness.gap_reason(gap, gap_message) if gap is not None else f"connection lost ({first.message})"
        liveness.go_offline(
            self.redis,
            self.settings,
            appid,
            reason=f"{cause}; automatic reconnect failed ({second.message})",
            action_required=RELOGIN,
            detected_at=detected_at,
        )
        self.finish(claim, seen=False)
        return "offline"

    def confirm(self, appid: str, warm_until: float) -> Verdict:
        """Whether a business read succeeds, allowing for a connection still being built until ``warm_until``."""
        delay = 0.2
        while True:
            read = self.upstream.call(PROBE_READ, appid)
            if read.ok:
                return Verdict(True)
            now = self.clock()
            if now >= warm_until:
                return Verdict(False, read.message or f"code {read.code}")
            if self.upstream.call(CHECK, appid).ok:
                # Built, yet the read fails: this is no warm-up.
                return Verdict(False, read.message or f"code {read.code}")
            if self._stop.wait(min(delay, max(warm_until - now, 0.01))):
                raise Abandoned
            delay = min(delay * 2, 1.0)

    def _run_probe(self, claim: Claim) -> None:
        try:
            outcome = self.probe(claim)
            log.debug("probe %s", outcome, extra={"appid": claim.appid, "outcome": outcome})
            record_probe(self.redis, outcome)
        except Abandoned:
            self._give_back(claim)
        except RedisError as exc:
            log.warning("probe aborted: redis unavailable (%s)", type(exc).__name__, extra={"appid": claim.appid})
        except Exception:
            # The lease runs out and a later round probes the instance again.
            log.exception("probe failed", extra={"appid": claim.appid})

    def _give_back(self, claim: Claim) -> None:
        try:
            self.release(claim)
        except RedisError:
            log.warning("could not hand back a probe; its lease will expire", extra={"appid": claim.appid})

    # --- main loop ----------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Probe until ``stop`` is set; probes in flight are given a moment, then handed back."""
        self._stop = stop
        log.info("prober started: every %.3gs, up to %d probes at once", self.interval, self.pool_size)
        pool = ThreadPoolExecutor(max_workers=self.pool_size, thread_name_prefix="probe")
        running: dict[Future[None], Claim] = {}
        failures = 0
        while not stop.is_set():
            for future in [f for f in running if f.done()]:
                del running[future]
            free = self.pool_size - len(running)
            try:
                claims, next_due = self.claim(free)
                failures = 0
            except RedisError as exc:
                failures += 1
                delay = min(0.1 * 2**failures, 5.0)
                log.warning("redis unavailable (%s); retrying in %.1fs", type(exc).__name__, delay)
                stop.wait(delay)
                continue
            except Exception:
                failures += 1
                log.exception("claiming probes failed")
                stop.wait(min(0.1 * 2**failures, 5.0))
                continue
            for claim in claims:
                running[pool.submit(self._run_probe, claim)] = claim
            pause = MAX_IDLE if next_due is None else min(max(next_due - self.clock(), MIN_TICK), MAX_IDLE)
            if len(running) >= self.pool_size:
                wait(list(running), timeout=pause, return_when=FIRST_COMPLETED)
            else:
                stop.wait(pause)
        # Probes waiting out a warm-up stop at once; one blocked in an HTTP call
        # gets until the grace ends, then its claim is handed back for it.
        self._stop.set()
        _, pending = wait(list(running), timeout=SHUTDOWN_GRACE)
        for future in pending:
            self._give_back(running[future])
        pool.shutdown(wait=False, cancel_futures=True)
        log.info("prober stopped")


def start_prober(settings: Settings, stop: threading.Event) -> threading.Thread:
    """Start the prober on a daemon thread of this worker; it stops when ``stop`` is set."""
    if not settings.upstream_url:
        log.info("no SVCGW_UPSTREAM_URL: the liveness prober is not running in this worker")
        thread = threading.Thread(target=lambda: None, name="prober", daemon=True)
        thread.start()
        return thread

    def run() -> None:
        redis = sync_client(settings, decode=True)
        client = httpx.Client(
            timeout=HTTP_TIMEOUT,
            trust_env=False,
            limits=httpx.Limits(max_connections=POOL_SIZE, max_keepalive_connections=POOL_SIZE),
        )
        try:
            Prober(settings, redis, Upstream(settings.upstream_url or "", client)).run(stop)
        except Exception:
            log.exception("the liveness prober stopped on an error")
        finally:
            client.close()
            redis.close()

    thread = threading.Thread(target=run, name="prober", daemon=True)
    thread.start()
    return thread
