"""What one liveness probe's observations mean: the prober's decision, without I/O.

A probe learns about an instance step by step, and what it asks next
depends on what it has heard so far. :func:`decide` is that dependence: given
the :class:`Facts` gathered until now, it names the next step, and
``worker.prober`` performs it and adds what it observed to the facts, until
the step is :class:`Done`. The steps, in the order a probe meets them:

1. :class:`Recover`: the instance is online again through a ``long/start``
   made after an ``InstanceOffline``; the ``InstanceRecovered`` it is owed
   (not auto-reconnected, recovered at that start) is queued before anything
   else.
2. A pending ``GapClosed`` saying the login is gone (-11002, -1008): offline
   with ``action_required`` manual, without asking the capability layer
   anything ("manual").
3. :class:`Read`: the business read, allowing for a connection still being
   built (``long/check`` non-zero) until ``warm_until``: ``since`` plus
   ``WARMUP_SECONDS`` when the instance is online, since a ``long/start`` is a
   connection call too. Usable: "online" (and ``InstanceRecovered``, not
   auto-reconnected, if the instance was offline).
4. :class:`Reconnect` with the caller's last proxy; when the capability layer
   accepts it, a second :class:`Read` with a warm-up from then. Usable:
   "reconnected" (and ``InstanceRecovered``, auto-reconnected, if it was
   offline).
5. :class:`AwaitGap`: a loss the prober found by itself (online, no
   ``GapClosed`` pending) waits ``GAP_GRACE_SECONDS`` for a ``GapClosed`` that
   explains it. One saying the login is gone makes it "manual".
6. Otherwise "offline": ``InstanceOffline`` with relogin, detected when the
   ``GapClosed`` arrived or else when the probe started.

When the capability layer cannot be asked at all (:attr:`Facts.unavailable`)
the probe is "undecided": the upstream being down says nothing about the
instance. Every probe ends with its outcome's name (for logs, metrics and
tests), at most one state flip (:class:`GoOnline`, :class:`GoOffline`, made by
``svcgw.liveness.transitions``), whether the instance was seen usable, and the error to
show when it could not decide.
"""

from __future__ import annotations

from dataclasses import dataclass

from svcgw.intake import gapclosed
from svcgw.liveness import transitions
from svcgw.liveness.events import MANUAL, RELOGIN

__all__ = [
    "WARMUP_SECONDS",
    "AwaitGap",
    "Done",
    "Facts",
    "Gap",
    "GoOffline",
    "GoOnline",
    "Judgement",
    "Read",
    "Reconnect",
    "Recover",
    "Step",
    "decide",
]

WARMUP_SECONDS = 4.0  # spec: long/check answers non-zero for about 3 s after a connection call

Gap = tuple[int, str]  # (code, message) of a GapClosed


@dataclass(frozen=True)
class Judgement:
    """Whether a call showed a usable connection; ``message`` says why not, ``at`` is when it answered."""

    usable: bool
    message: str = ""
    at: float = 0.0


@dataclass(frozen=True)
class Facts:
    """What a probe knows: the instance's fields at claim time, then each observation as it comes."""

    status: str | None  # liveness status at claim time
    owes_recovery: bool  # online, with ``offline_since`` set: back through long/start
    since: float  # when the status last changed
    gap: Gap | None  # a GapClosed waiting for the prober at claim time
    gap_at: float | None  # when that GapClosed arrived
    started: float  # when the probe started
    recovered: bool = False  # the owed InstanceRecovered is queued
    first: Judgement | None = None  # the business read
    reconnect: Judgement | None = None  # login/reconnect's answer
    second: Judgement | None = None  # the business read after an accepted reconnect
    looked_for_gap: bool = False  # the grace for a late GapClosed is over
    late_gap: Gap | None = None  # a GapClosed that arrived during that grace
    unavailable: str | None = None  # why the capability layer could not be asked


# --- steps ----------------------------------------------------------------------
@dataclass(frozen=True)
class Recover:
    """Queue the ``InstanceRecovered`` owed since a ``long/start``; then :attr:`Facts.recovered`."""

    at: float


@dataclass(frozen=True)
class Read:
    """The business read, waiting out a warm-up until ``warm_until``; then ``first`` or ``second``."""

    warm_until: float
    after_reconnect: bool


@dataclass(frozen=True)
class Reconnect:
    """``login/reconnect`` with the last proxy; then :attr:`Facts.reconnect`."""


@dataclass(frozen=True)
class AwaitGap:
    """Wait ``GAP_GRACE_SECONDS`` and read the GapClosed fields again; then ``looked_for_gap``, ``late_gap``."""


@dataclass(frozen=True)
class GoOnline:
    auto_reconnected: bool
    at: float


@dataclass(frozen=True)
class GoOffline:
    reason: str
    action_required: str
    detected_at: float


@dataclass(frozen=True)
class Done:
    """The probe's end: its outcome, the flip it makes, and what ``finish`` records."""

    outcome: str  # online, reconnected, manual, offline, undecided
    flip: GoOnline | GoOffline | None = None
    seen: bool = False
    error: str = ""


Step = Recover | Read | Reconnect | AwaitGap | Done


def _manual(gap: Gap | None) -> bool:
    return gap is not None and gap[0] in gapclosed.MANUAL_GAP_CODES


def decide(facts: Facts) -> Step:
    """The next step of a probe that knows ``facts`` (see the module docstring)."""
    if facts.owes_recovery and not facts.recovered:
        return Recover(facts.started)
    detected_at = (facts.gap_at if facts.gap_at is not None else facts.started) if facts.gap else facts.started
    if facts.gap is not None and _manual(facts.gap):
        code, message = facts.gap
        return Done("manual", GoOffline(gapclosed.gap_reason(code, message), MANUAL, detected_at))
    if facts.unavailable is not None:
        return Done("undecided", error=f"capability layer unavailable ({facts.unavailable})")
    offline = facts.status == transitions.OFFLINE
    if facts.first is None:
        warm_until = facts.since + WARMUP_SECONDS if facts.status == transitions.ONLINE else 0.0
        return Read(warm_until, after_reconnect=False)
    if facts.first.usable:
        return Done("online", GoOnline(False, facts.first.at) if offline else None, seen=True)
    if facts.reconnect is None:
        return Reconnect()
    if facts.reconnect.usable and facts.second is None:
        return Read(facts.reconnect.at + WARMUP_SECONDS, after_reconnect=True)
    second = facts.second if facts.reconnect.usable and facts.second is not None else facts.reconnect
    if second.usable:
        return Done("reconnected", GoOnline(True, second.at) if offline else None, seen=True)
    if facts.status == transitions.ONLINE and facts.gap is None:
        # A GapClosed explaining the loss may be on its way; if it says the
        # login is gone, the caller must be told a scan is needed.
        if not facts.looked_for_gap:
            return AwaitGap()
        if facts.late_gap is not None and _manual(facts.late_gap):
            code, message = facts.late_gap
            return Done("manual", GoOffline(gapclosed.gap_reason(code, message), MANUAL, detected_at))
    if facts.gap is not None:
        cause = gapclosed.gap_reason(*facts.gap)
    else:
        cause = f"connection lost ({facts.first.message})"
    reason = f"{cause}; automatic reconnect failed ({second.message})"
    return Done("offline", GoOffline(reason, RELOGIN, detected_at))
