"""The probing benchmark's reading of the hanging destinations' requests, and its summary."""

from __future__ import annotations

from tests.bench import verdict
from tests.bench.probing import FIGURES, TARGETS, _most_within, summarise


def test_requests_within_one_timeout_of_each_other_were_in_flight_at_once() -> None:
    assert _most_within([], 5.0) == 0
    assert _most_within([0.0, 0.1, 0.2, 5.3, 10.4], 5.0) == 3
    assert _most_within([0.0, 5.0, 10.0, 15.0], 5.0) == 1  # one probe at a time, each held the timeout


def _scenario(ratio: float, undelivered: int = 0) -> dict[str, object]:
    pair = dict(dict.fromkeys(FIGURES, 1.0), vs_control=ratio, undelivered=undelivered)
    return {**pair, "pairs": [pair]}


def test_the_median_of_the_rounds_is_judged_and_a_loss_fails_it() -> None:
    rounds = [
        {"after": {"isolation": _scenario(0.95), "accounts": _scenario(0.9)}},
        {"after": {"isolation": _scenario(0.97), "accounts": _scenario(1.0, undelivered=1)}},
    ]
    figures = summarise(rounds, ["isolation", "accounts"])
    assert figures["after"]["isolation"]["vs_control"] == 0.96
    assert figures["after"]["isolation"]["vs_control_all_pairs"] == [0.95, 0.97]
    judged = {j.name: j for j in verdict.judge(figures, TARGETS)}
    assert judged["isolation_vs_control"].met
    assert not judged["accounts_vs_control"].met and "undelivered" in judged["accounts_vs_control"].why
