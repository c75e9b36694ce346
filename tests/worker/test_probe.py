"""What a probe's observations mean: each path of the decision, without Redis or the capability layer."""

from __future__ import annotations

from dataclasses import replace

from worker.probe import (
    WARMUP_SECONDS,
    AwaitGap,
    Done,
    Facts,
    GoOffline,
    GoOnline,
    Judgement,
    Read,
    Reconnect,
    Recover,
    decide,
)

STARTED = 1_800_000_000.0
USABLE = Judgement(True, at=STARTED + 1)
CLOSED = Judgement(False, "long connection closed", STARTED + 1)


def facts(status: str = "online", **more: object) -> Facts:
    base = Facts(status=status, owes_recovery=False, since=STARTED - 60, gap=None, gap_at=None, started=STARTED)
    return replace(base, **more)


def test_a_usable_read_is_online_and_flips_only_an_offline_instance() -> None:
    assert decide(facts()) == Read(STARTED - 60 + WARMUP_SECONDS, after_reconnect=False)
    assert decide(facts(first=USABLE)) == Done("online", None, seen=True)
    assert decide(facts("offline")) == Read(0.0, after_reconnect=False)  # offline: no warm-up
    assert decide(facts("offline", first=USABLE)) == Done("online", GoOnline(False, USABLE.at), seen=True)


def test_a_failed_read_reconnects_then_reads_again_after_a_warm_up() -> None:
    assert decide(facts(first=CLOSED)) == Reconnect()
    accepted = Judgement(True, at=STARTED + 2)
    assert decide(facts(first=CLOSED, reconnect=accepted)) == Read(STARTED + 2 + WARMUP_SECONDS, after_reconnect=True)
    healed = facts(first=CLOSED, reconnect=accepted, second=USABLE)
    assert decide(healed) == Done("reconnected", None, seen=True)
    assert decide(replace(healed, status="offline")) == Done("reconnected", GoOnline(True, USABLE.at), seen=True)


def test_a_loss_found_by_the_prober_waits_for_a_gap_closed_then_is_offline_relogin() -> None:
    refused = Judgement(False, "reconnect refused", STARTED + 2)
    lost = facts(first=CLOSED, reconnect=refused)
    assert decide(lost) == AwaitGap()
    assert decide(replace(lost, looked_for_gap=True)) == Done(
        "offline",
        GoOffline(
            "connection lost (long connection closed); automatic reconnect failed (reconnect refused)",
            "relogin",
            STARTED,
        ),
    )
    late = decide(replace(lost, looked_for_gap=True, late_gap=(-11002, "elsewhere")))
    assert isinstance(late, Done) and late.outcome == "manual"
    assert isinstance(late.flip, GoOffline) and late.flip.action_required == "manual"
    assert "-11002" in late.flip.reason and late.flip.detected_at == STARTED
    # A late close that asks only for a probe changes nothing: relogin.
    other = decide(replace(lost, looked_for_gap=True, late_gap=(-1, "error")))
    assert isinstance(other, Done) and other.outcome == "offline"


def test_an_offline_instance_still_lost_is_reported_again_without_waiting() -> None:
    # The flip itself is a no-op then; svcgw.liveness.transitions queues no second event.
    step = decide(facts("offline", first=CLOSED, reconnect=Judgement(True, at=STARTED + 2), second=CLOSED))
    assert isinstance(step, Done) and step.outcome == "offline" and not step.seen


def test_a_pending_gap_closed_names_the_cause_and_the_detection_time() -> None:
    gap = facts(gap=(-11001, "reconnect"), gap_at=STARTED - 5, first=CLOSED, reconnect=CLOSED)
    step = decide(gap)
    assert isinstance(step, Done) and isinstance(step.flip, GoOffline)
    assert step.flip.reason.startswith("connection must be re-established (GapClosed -11001: reconnect)")
    assert step.flip.detected_at == STARTED - 5


def test_a_manual_gap_closed_goes_offline_without_a_call() -> None:
    step = decide(facts(gap=(-1008, "phone"), gap_at=STARTED - 3))
    assert isinstance(step, Done) and step.outcome == "manual" and not step.seen
    assert step.flip == GoOffline("logged out on the mobile side (GapClosed -1008: phone)", "manual", STARTED - 3)


def test_an_owed_recovery_comes_first() -> None:
    owed = facts(owes_recovery=True, gap=(-1008, ""), gap_at=STARTED)
    assert decide(owed) == Recover(STARTED)
    step = decide(replace(owed, recovered=True))
    assert isinstance(step, Done) and step.outcome == "manual"


def test_an_unreachable_layer_decides_nothing() -> None:
    step = decide(facts(first=CLOSED, unavailable="login/reconnect: HTTP 502"))
    assert step == Done("undecided", error="capability layer unavailable (login/reconnect: HTTP 502)")
