"""The side-by-side pipeline benchmark's summary: medians per tree, the worst round's losses, ratios."""

from __future__ import annotations

import pytest

from tests.bench import verdict
from tests.bench.pipeline import FIGURES, TARGETS, main, summarise, table


def _run(rate: float, undelivered: int = 0) -> dict[str, float]:
    return dict(dict.fromkeys(FIGURES, 1.0), deliveries_per_s=rate, undelivered=undelivered)


def test_medians_ratios_and_the_worst_round_judged() -> None:
    rounds = [
        {"before": _run(100.0), "after": _run(95.0)},
        {"after": _run(60.0, undelivered=3), "before": _run(110.0)},
        {"before": _run(90.0), "after": _run(99.0)},
    ]
    figures = summarise(rounds)
    assert figures["before"]["deliveries_per_s"] == 100.0 and figures["after"]["deliveries_per_s"] == 95.0
    assert figures["ratios"]["deliveries_per_s"] == 0.95
    assert figures["paired"]["deliveries_per_s"] == 0.95  # of 0.95, 0.55 and 1.1
    # One round lost events: the target is not met, whatever the medians say.
    assert figures["after"]["undelivered"] == 3
    (judged,) = verdict.judge(figures, TARGETS)
    assert not judged.met and "after.undelivered" in judged.why
    assert len(table(figures)) == len(FIGURES) + 1


def test_a_machine_that_drifts_between_rounds_is_judged_round_by_round() -> None:
    """Each round's two trees run one after the other: a round on a slow machine slows both. The medians of
    each tree come from different rounds; each round's own ratio does not."""
    rounds = [
        {"before": _run(100.0), "after": _run(90.0)},
        {"after": _run(190.0), "before": _run(200.0)},
        {"before": _run(150.0), "after": _run(60.0)},  # the after tree alone was slow in this one
    ]
    figures = summarise(rounds)
    assert figures["ratios"]["deliveries_per_s"] == 0.6  # 90 of 150: medians of different rounds
    assert figures["paired"]["deliveries_per_s"] == 0.9  # of 0.9, 0.95 and 0.4
    (judged,) = verdict.judge(figures, TARGETS)
    assert judged.met and judged.value == 0.9
    zero = summarise([{"before": _run(100.0), "after": _run(90.0)}, {"before": _run(0.0), "after": _run(90.0)}])
    assert zero["paired"]["deliveries_per_s"] is None  # a round without a ratio: not judged
    assert not verdict.judge(zero, TARGETS)[0].met
    assert "paired" in table(figures)[0]


def test_a_slower_tree_is_not_met_and_alone_nothing_is_compared() -> None:
    figures = summarise([{"before": _run(100.0), "after": _run(80.0)}])
    (judged,) = verdict.judge(figures, TARGETS)
    assert not judged.met and judged.value == 0.8
    assert "ratios" not in summarise([{"after": _run(80.0)}])


def test_instances_below_one_are_refused_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--instances", "0"])
    assert exited.value.code == 2
    assert "--instances must be at least 1" in capsys.readouterr().err
