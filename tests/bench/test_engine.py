"""The engine bench: its engine alone drains what ``svcgw serve`` stored, and its figures are summarised per tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from svcgw.storage.keys import PLAIN as keys
from tests.bench.engine import FIGURES, drain, exit_status, judge
from tests.bench.gateway import Tree
from tests.bench.pipeline import TreeBench, summarise, table
from tests.bench.scenarios import Plan
from tests.bench.services import REPO

POSTS = 24


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_engine_alone_drains_every_stored_post_through_its_instant_sender(tmp_path: Path) -> None:
    bench = TreeBench(Plan(short=True, fast_ports=4), tmp_path, "always", tree=REPO)
    bench.start_tree()
    try:
        with httpx.Client(base_url=bench.base, trust_env=False, timeout=10) as client:
            for n in range(POSTS):
                body = b'{"event_type":"Msg","events":[{"id":"e-%d","roomId":1}]}' % n
                answer = client.post(bench.fast[n % 4].path, content=body, headers={"Content-Type": "application/json"})
                assert answer.status_code == 200, answer.text
        redis, name = bench.redis.client, bench.settings.queue_name
        assert redis.llen(keys.rq.queue(name)) == POSTS
        assert bench.server is not None
        bench.server.stop()
        drained = drain(Tree("after", REPO), bench.env, tmp_path)
        # Burst mode ends once nothing is queued, held or scheduled: every job was sent once and finished.
        assert drained["sent"] == POSTS
        assert redis.llen(keys.rq.queue(name)) == 0 and redis.zcard(keys.inflight(name)) == 0
        assert redis.zcard(keys.rq.scheduled(name)) == 0
        assert drained["cpu_s"] > 0
        # The engine's own log lines went to its file, one per attempt.
        assert (tmp_path / "engine.log").read_text().count('"delivery attempt"') == POSTS
    finally:
        bench.stop()


def _run(engine_us: float, undelivered: int = 0) -> dict[str, float]:
    return {"stored": 100.0, "undelivered": undelivered, "engine_cpu_us_per_delivery": engine_us,
            "request_cpu_us": 100.0, "engine_vs_request": engine_us / 100}  # fmt: skip


def test_the_engines_figures_are_summarised_per_tree_and_round_by_round() -> None:
    rounds = [
        {"before": _run(300.0), "after": _run(240.0)},
        {"after": _run(300.0, undelivered=2), "before": _run(400.0)},
        {"before": _run(200.0), "after": _run(190.0)},
    ]
    figures = summarise(rounds, FIGURES)
    assert figures["before"]["engine_cpu_us_per_delivery"] == 300.0
    assert figures["after"]["engine_cpu_us_per_delivery"] == 240.0
    assert figures["paired"]["engine_cpu_us_per_delivery"] == 0.8  # of 0.8, 0.75 and 0.95
    assert figures["after"]["undelivered"] == 2
    lines = table(figures, FIGURES)
    assert len(lines) == len(FIGURES) + 1 and lines[2].startswith("engine_cpu_us_per_delivery")


def _figures(paired: float, *, undelivered: int = 0, mode: str = "full") -> dict[str, Any]:
    tree = {"engine_cpu_us_per_delivery": 100.0, "undelivered": 0}
    return {"before": dict(tree), "after": dict(tree, undelivered=undelivered),
            "paired": {"engine_cpu_us_per_delivery": paired}, "setup": {"mode": mode}}  # fmt: skip


def test_the_engine_is_judged_against_the_named_commit_by_its_paired_ratio() -> None:
    assert exit_status(judge(_figures(1.05), 1.1)) == 0
    worse = judge(_figures(1.2), 1.1)
    assert worse["verdict"]["not_met"] == ["engine_cpu_vs_before"] and exit_status(worse) == 1
    assert exit_status(judge(_figures(0.79), 0.8)) == 0 and exit_status(judge(_figures(0.85), 0.8)) == 1
    # A partial sample is never met, and a short run is not judged, though it still must deliver all.
    assert exit_status(judge(_figures(0.5, undelivered=3), 1.1)) == 1
    assert exit_status(judge(_figures(1.5, mode="short"), 1.1)) == 0
    assert exit_status(judge(_figures(1.0, undelivered=1, mode="short"), 1.1)) == 1


def test_without_a_named_commit_nothing_is_judged() -> None:
    alone = {"after": {"engine_cpu_us_per_delivery": 100.0, "undelivered": 0}, "setup": {"mode": "full"}}
    judged = judge(alone, 1.1)
    assert judged["targets"] == {} and exit_status(judged) == 0
