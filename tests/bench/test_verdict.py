"""The benchmark's verdicts on synthetic figures: met only on a full sample, never on nothing."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from tests.bench import gateway
from tests.bench.__main__ import TARGETS, finish, judge
from tests.bench.verdict import Need, Target, exit_status, lookup, ratio, summary
from tests.bench.verdict import judge as judge_targets

MEMORY = {"events": 300, "logged_bytes_per_event": 100, "delivered_bytes_per_event": 100, "commands_per_event": 17}


def good() -> dict[str, Any]:
    """Figures of a run in which every target is met, on every piece of its work."""
    return {
        "ingest": {"saturation_per_s": 4000, "saturation_failed": 0, "acknowledged": 40000, "stored": 40000,
                   "fixed_p99_ms": 5.0, "fixed_posts_due": 5000, "fixed_ok": 5000, "fixed_failed": 0},
        "e2e": {"deliveries_per_s": 7000, "queued": 40000, "delivered": 40000},
        "latency": {"posts_due": 7000, "posted": 7000, "delivered": 7000, "p50_ms": 5.0, "p99_ms": 20.0},
        "slow": {"expected": 8000, "delivered": 8000, "deliveries_per_s": 5000, "rss_mb": 380},
        "isolation": {"healthy_expected": 27000, "healthy_delivered": 27000, "control_delivered": 27000,
                      "vs_control": 1.0},
        "accounts": {"healthy_expected": 22500, "healthy_delivered": 22500, "control_delivered": 22500,
                     "vs_control": 0.95},
        "retry": {"due_at_once": 10000, "attempted": 10000, "lateness_max_s": 0.5},
        "reference": {"rq_simpleworker_x2": {"jobs": 1500, "delivered": 1500},
                      "aiohttp_loop_c50": {"requests": 50000, "failed": 0}},
        "redis": {"commands_per_delivery": 8.0},
        "ratios": {"e2e_vs_simpleworker": 30.0, "e2e_vs_aiohttp": 0.5, "isolation": 0.95},
        "memory": {"small": dict(MEMORY), "msg": dict(MEMORY, logged_bytes_per_event=2000,
                                                      delivered_bytes_per_event=1000)},
        "gateway": {
            "ratios": {"w1_vs_direct": 0.6, "w2_vs_direct": 0.9, "sim_w1_vs_sim_direct": 0.55},
            "after": {"c1_added_p50_ms": 0.3, "c1_added_p99_ms": 0.5, "round_trips_per_call": 1.0,
                      "counted_failed": 0, "rss_growth_mb": 0.1, "soak_failed": 0},
            "setup": {"failed_calls": 0, "answers_not_byte_exact": 0},
        },
        "setup": {"mode": "full"},
    }  # fmt: skip


def judged(figures: dict[str, Any]) -> dict[str, dict[str, Any]]:
    judge(figures)
    return dict(figures["targets"])


def not_met(figures: dict[str, Any]) -> set[str]:
    return {name for name, target in judged(figures).items() if not target["met"]}


def put(figures: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    *path, last = dotted.split(".")
    parent = figures
    for part in path:
        parent = parent[part]
    parent[last] = value
    return figures


def test_all_good_is_met_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    figures = good()
    assert not_met(figures) == set()
    assert figures["verdict"] == {"judged": True, "met": True, "targets": len(figures["targets"]), "not_met": []}
    assert finish(figures) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2] == f"verdict: met, all {len(figures['targets'])} targets"
    assert orjson.loads(lines[-1])["verdict"]["met"] is True


def test_every_target_is_judged_on_the_figures() -> None:
    names = {t.name for t in TARGETS + gateway.GATEWAY_TARGETS}
    assert set(judged(good())) == names
    # Each target's figure is in the synthetic run, so that the tests below say something of each.
    assert all(lookup(good(), t.figure) is not None for t in TARGETS + gateway.GATEWAY_TARGETS)


@pytest.mark.parametrize(
    ("sample", "targets"),
    [
        ({"latency.posted": 0, "latency.delivered": 0, "latency.p50_ms": None, "latency.p99_ms": None},
         {"latency_p50_ms", "latency_p99_ms"}),
        ({"retry.attempted": 0, "retry.lateness_max_s": None}, {"retry_lateness_max_s"}),
        ({"e2e.queued": 0, "e2e.delivered": 0, "e2e.deliveries_per_s": 0.0, "ratios.e2e_vs_simpleworker": None,
          "ratios.e2e_vs_aiohttp": None, "ratios.isolation": None},
         {"e2e_per_s", "e2e_vs_simpleworker", "e2e_vs_aiohttp", "isolation_ratio", "commands_per_delivery"}),
        ({"memory.small.events": 0}, {"memory_small_delivered", "memory_small_logged", "memory_small_commands"}),
    ],
)  # fmt: skip
def test_an_empty_sample_is_not_met(sample: dict[str, Any], targets: set[str]) -> None:
    figures = good()
    for dotted, value in sample.items():
        put(figures, dotted, value)
    assert not_met(figures) == targets


@pytest.mark.parametrize(
    ("dotted", "value", "targets"),
    [
        ("latency.delivered", 6999, {"latency_p50_ms", "latency_p99_ms"}),
        ("latency.posted", 6990, {"latency_p50_ms", "latency_p99_ms"}),  # posts unanswered: not in the sample
        ("retry.attempted", 9999, {"retry_lateness_max_s"}),
        ("e2e.delivered", 39999, {"e2e_per_s", "e2e_vs_simpleworker", "e2e_vs_aiohttp", "isolation_ratio",
                                  "commands_per_delivery"}),
        ("slow.delivered", 7000, {"slow_per_s", "slow_rss_mb"}),
        ("isolation.healthy_delivered", 26000, {"isolation_vs_control", "isolation_ratio"}),
        ("isolation.control_delivered", 26000, {"isolation_vs_control"}),
        ("accounts.healthy_delivered", 22000, {"accounts_vs_control"}),
        ("accounts.control_delivered", 22000, {"accounts_vs_control"}),
        ("reference.rq_simpleworker_x2.delivered", 1499, {"e2e_vs_simpleworker"}),
        ("ingest.stored", 39999, {"ingest_per_s"}),  # an acknowledged post not stored
        ("ingest.fixed_ok", 4999, {"ingest_p99_ms_at_1000"}),
    ],
)  # fmt: skip
def test_part_of_the_work_is_not_met(dotted: str, value: int, targets: set[str]) -> None:
    figures = put(good(), dotted, value)
    assert not_met(figures) == targets
    for name in targets:
        assert dotted in figures["targets"][name]["why"]


@pytest.mark.parametrize(
    ("dotted", "value", "targets"),
    [
        ("ingest.saturation_failed", 3, {"ingest_per_s"}),
        ("ingest.fixed_failed", 1, {"ingest_p99_ms_at_1000"}),
        ("reference.aiohttp_loop_c50.failed", 2, {"e2e_vs_aiohttp"}),
        ("gateway.setup.failed_calls", 1, {t.name for t in gateway.GATEWAY_TARGETS}),
        ("gateway.setup.answers_not_byte_exact", 1, {t.name for t in gateway.GATEWAY_TARGETS}),
        ("gateway.after.counted_failed", 5, {"gateway_round_trips"}),
        ("gateway.after.soak_failed", 5, {"gateway_rss_growth_mb"}),
    ],
)  # fmt: skip
def test_failed_calls_are_not_met(dotted: str, value: int, targets: set[str]) -> None:
    assert not_met(put(good(), dotted, value)) == targets


@pytest.mark.parametrize(
    "dotted",
    ["ratios.e2e_vs_aiohttp", "gateway.ratios.sim_w1_vs_sim_direct", "isolation.vs_control", "slow.rss_mb",
     "gateway.setup.failed_calls", "reference.aiohttp_loop_c50.failed"],
)  # fmt: skip
def test_a_missing_figure_is_not_met(dotted: str) -> None:
    figures = good()
    *path, last = dotted.split(".")
    del lookup(figures, ".".join(path))[last]
    targets = judged(figures)
    missed = {name: t for name, t in targets.items() if not t["met"]}
    assert missed and all("no figure" in t["why"] for t in missed.values())


def test_a_ratio_with_a_zero_side_is_missing_and_not_met() -> None:
    assert ratio(0.0, 100.0) is None and ratio(100.0, 0.0) is None and ratio(None, 1.0) is None
    assert ratio(50.0, 100.0) == 0.5
    figures = put(good(), "ratios.e2e_vs_aiohttp", ratio(7000.0, 0.0))
    assert not_met(figures) == {"e2e_vs_aiohttp"}
    assert figures["targets"]["e2e_vs_aiohttp"]["why"] == "no figure"


def test_out_of_bound_is_not_met_and_a_bool_is_no_figure() -> None:
    targets = [Target("t", "a", "<=", 1, "a at most 1", (Need("n", "==", 0),))]
    assert [j.met for j in judge_targets({"a": 1, "n": 0}, targets)] == [True]
    assert judge_targets({"a": 1.5, "n": 0}, targets)[0].why == "out of bound"
    assert judge_targets({"a": True, "n": 0}, targets)[0].why == "no figure"
    assert judge_targets({"a": 1, "n": 2}, targets)[0].why == "n 2, needs == 0"
    assert (
        judge_targets({"a": 1, "n": 2, "m": 2}, [Target("t", "a", ">=", 1, "", (Need("n", ">", "m"),))])[0].why
        == "n 2, needs > m (2)"
    )


def test_a_target_not_met_exits_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    figures = put(good(), "retry.lateness_max_s", 2.2)
    judge(figures)
    assert finish(figures) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2] == f"verdict: NOT met, 1 of {len(figures['targets'])} targets: retry_lateness_max_s"
    last = orjson.loads(lines[-1])
    assert last["verdict"]["not_met"] == ["retry_lateness_max_s"]
    assert last["targets"]["retry_lateness_max_s"]["met"] is False


def test_a_short_run_is_not_judged_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    figures = put(copy.deepcopy(good()), "setup.mode", "short")
    put(figures, "e2e.delivered", 0)
    judge(figures)
    assert figures["verdict"]["judged"] is False and figures["verdict"]["met"] is False
    assert finish(figures) == 0
    assert capsys.readouterr().out.strip().splitlines()[-2].startswith("verdict: not judged (short run")


def test_exit_status_of_a_summary() -> None:
    met = judge_targets({"a": 1}, [Target("t", "a", ">=", 1, "a")])
    missed = judge_targets({"a": 0}, [Target("t", "a", ">=", 1, "a")])
    assert exit_status(summary(met, short=False)) == 0
    assert exit_status(summary(missed, short=False)) == 1
    assert exit_status(summary(missed, short=True)) == 0
