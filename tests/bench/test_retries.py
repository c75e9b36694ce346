"""The retries-due-at-once benchmark's summary: medians per tree, a missing figure left out, the worst losses."""

from __future__ import annotations

from tests.bench import verdict
from tests.bench.retries import FIGURES, TARGETS, summarise, table


def _run(due_vs_e2e: float | None, unattempted: int = 0) -> dict[str, float | None]:
    return dict(dict.fromkeys(FIGURES, 1.0), due_vs_e2e=due_vs_e2e, unattempted=unattempted)


def test_medians_per_tree_and_a_round_that_missed_retries_is_not_met() -> None:
    figures = summarise([
        {"before": _run(0.45), "after": _run(0.92)},
        {"after": _run(None, unattempted=2), "before": _run(0.48)},
        {"before": _run(0.5), "after": _run(1.3)},
    ])  # fmt: skip
    assert figures["before"]["due_vs_e2e"] == 0.48 and figures["after"]["due_vs_e2e"] == 1.11
    assert figures["ratios"]["due_vs_e2e"] == 2.31
    (judged,) = verdict.judge(figures, TARGETS)
    assert not judged.met and "after.unattempted" in judged.why
    assert len(table(figures)) == len(FIGURES) + 1
    (met,) = verdict.judge(summarise([{"after": _run(0.9)}]), TARGETS)
    assert met.met
