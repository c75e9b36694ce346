"""The fixed-rate latency benchmark's summary: medians per tree, a missing figure left out, the worst loss."""

from __future__ import annotations

from tests.bench.latency import FIGURES, summarise


def _run(p50_ratio: float | None, undelivered: int = 0) -> dict[str, float | int | None]:
    return dict(dict.fromkeys(FIGURES, 1.0), p50_ratio=p50_ratio, undelivered=undelivered)


def test_medians_per_tree_and_the_worst_undelivered() -> None:
    figures = summarise([
        {"before": _run(7.3), "after": _run(4.4)},
        {"after": _run(None, undelivered=3), "before": _run(5.4)},
        {"before": _run(6.5), "after": _run(2.7)},
    ])  # fmt: skip
    assert figures["before"]["p50_ratio"] == 6.5 and figures["after"]["p50_ratio"] == 3.55
    assert figures["after"]["undelivered"] == 3 and figures["before"]["undelivered"] == 0
    assert summarise([{"after": _run(None)}])["after"]["p50_ratio"] is None  # no sample, no latency
