"""The benchmark's verdicts on synthetic figures: met only on a full sample, never on nothing, and the
same on a machine twice as fast or twice as slow."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.bench import gateway, memory
from tests.bench.__main__ import TARGETS, derive, finish
from tests.bench.verdict import Need, Target, exit_status, lookup, ratio, report, rows, summary
from tests.bench.verdict import judge as judge_targets
from tests.bench.verdict import line as verdict_line

MEMORY = {"events": 300, "logged_bytes_per_event": 100, "delivered_bytes_per_event": 100, "commands_per_event": 17}
ALL_TARGETS = TARGETS + gateway.GATEWAY_TARGETS


def good() -> dict[str, Any]:
    """Figures measured in a run in which every target is met, on every piece of its work."""
    return {
        "ingest": {"saturation_per_s": 7000.0, "saturation_failed": 0, "saturation_p50_ms": 10.0,
                   "acknowledged": 40000, "stored": 40000, "fixed_p99_ms": 5.0, "fixed_posts_due": 5600,
                   "fixed_ok": 5600, "fixed_failed": 0, "commands_per_post": 12.0, "bytes_per_event_logged": 700},
        "e2e": {"deliveries_per_s": 9000.0, "queued": 40000, "delivered": 40000, "commands_per_delivery": 8.0,
                "bytes_per_event_delivered_change": -500},
        "latency": {"posts_due": 7000, "posted": 7000, "delivered": 7000, "p50_ms": 6.0, "p99_ms": 20.0},
        "latency_light": {"posts_due": 1500, "posted": 1500, "delivered": 1500, "p50_ms": 4.0, "p99_ms": 8.0},
        "slow": {"expected": 8000, "delivered": 8000, "deliveries_per_s": 7000.0, "rss_mb": 380},
        "isolation": {"healthy_expected": 27000, "healthy_delivered": 27000, "control_delivered": 27000,
                      "vs_control": 1.0, "healthy_per_s": 8500.0},
        "accounts": {"healthy_expected": 22500, "healthy_delivered": 22500, "control_delivered": 22500,
                     "vs_control": 0.95},
        "retry": {"due_at_once": 10000, "attempted": 10000, "attempts_per_s": 8000.0},
        "reference": {"rq_simpleworker_x2": {"jobs": 800, "delivered": 800, "per_s": 300.0, "commands_per_job": 52.0,
                                             "commands_per_enqueue": 8.0},
                      "aiohttp_loop_c50": {"requests": 50000, "failed": 0, "per_s": 15000.0}},
        "memory": {"small": dict(MEMORY), "msg": dict(MEMORY, logged_bytes_per_event=2000,
                                                      delivered_bytes_per_event=1000)},
        "gateway": {
            "ratios": {"w1_vs_direct": 0.6, "w2_vs_direct": 0.9, "sim_w1_vs_sim_direct": 0.55,
                       "added_p50_vs_sim_p50": 2.7, "added_p99_vs_sim_p99": 2.5},
            "after": {"round_trips_per_call": 1.0, "counted_failed": 0, "rss_growth_mb": 0.1, "soak_failed": 0},
            "setup": {"failed_calls": 0, "answers_not_byte_exact": 0},
        },
        "setup": {"mode": "full"},
    }  # fmt: skip


def judged(figures: dict[str, Any]) -> dict[str, dict[str, Any]]:
    derive(figures)
    finish(figures, "")
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
    counted = sum(1 for target in figures["targets"].values() if target["judged"])
    assert figures["verdict"] == {"judged": True, "met": True, "targets": counted, "not_met": []}
    assert finish(figures, "") == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2] == f"verdict: met, all {counted} targets"
    assert orjson.loads(lines[-1])["verdict"]["met"] is True


def test_end_to_end_against_the_aiohttp_loop_is_reported_not_judged(capsys: pytest.CaptureFixture[str]) -> None:
    # The same code reads 0.39 to 0.57 on different machines: below its bound, the run is still met.
    figures = put(good(), "e2e.deliveries_per_s", 15000.0 * 0.39)
    assert not_met(figures) == {"e2e_vs_aiohttp"}
    assert figures["targets"]["e2e_vs_aiohttp"]["judged"] is False
    assert figures["verdict"]["met"] is True and figures["verdict"]["not_met"] == []
    assert finish(figures, "") == 0
    (row,) = [r for r in rows(figures["targets"]) if r.startswith("e2e_vs_aiohttp")]
    assert row.endswith("reported, not judged: outside >= 0.55")
    # End to end against stock RQ of the same run stays judged.
    worse = put(good(), "reference.rq_simpleworker_x2.per_s", 9000.0)
    assert not_met(worse) == {"e2e_vs_simpleworker"} and worse["verdict"]["met"] is False


def test_every_target_is_judged_on_the_figures() -> None:
    figures = good()
    assert set(judged(figures)) == {t.name for t in ALL_TARGETS}
    # Each target's figure is in the synthetic run, so that the tests below say something of each.
    assert all(lookup(figures, t.figure) is not None for t in ALL_TARGETS)


def test_no_target_is_a_rate_or_a_time() -> None:
    # A speed is judged against a reference of the same run; counts, bytes and megabytes keep their bounds.
    speeds = [t.name for t in ALL_TARGETS if re.search(r"(_per_s|_ms|_s)$", t.figure)]
    assert speeds == []
    kept = {t.name for t in ALL_TARGETS if not re.search(r"(^|\.)ratios\.|vs_control$", t.figure)}
    assert kept == {"slow_rss_mb", "commands_per_delivery", "gateway_round_trips", "gateway_rss_growth_mb",
                    *(t.name for t in memory.targets())}  # fmt: skip


def _scaled(figures: dict[str, Any], factor: float) -> dict[str, Any]:
    """The same run on a machine ``factor`` times as fast: every rate times it, every time divided by it."""
    scaled = copy.deepcopy(figures)

    def walk(node: dict[str, Any]) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value)
            elif key == "per_s" or key.endswith("_per_s"):
                node[key] = value * factor
            elif key.endswith(("_ms", "_s")):
                node[key] = value / factor

    walk(scaled)
    return scaled


@pytest.mark.parametrize("factor", [2.0, 0.5, 1 / 2.9])
@pytest.mark.parametrize("missed", [None, "retry.attempts_per_s", "latency.p50_ms", "ingest.saturation_per_s"])
def test_a_machine_twice_as_fast_or_as_slow_gives_the_same_verdict(factor: float, missed: str | None) -> None:
    figures = good()
    if missed is not None:  # one figure that misses its target, on either machine
        put(figures, missed, lookup(figures, missed) * (0.5 if missed.endswith("_per_s") else 3))
    faster = _scaled(figures, factor)
    assert judged(faster) == judged(figures)
    assert faster["ratios"] == figures["ratios"]
    assert len(not_met(figures)) == (0 if missed is None else 1)


@pytest.mark.parametrize(
    ("sample", "targets"),
    [
        ({"latency.posted": 0, "latency.delivered": 0, "latency.p50_ms": None, "latency.p99_ms": None},
         {"latency_p50_vs_light", "latency_p99_vs_light"}),
        ({"latency_light.posted": 0, "latency_light.delivered": 0, "latency_light.p50_ms": None,
          "latency_light.p99_ms": None}, {"latency_p50_vs_light", "latency_p99_vs_light"}),
        ({"retry.attempted": 0, "retry.attempts_per_s": None}, {"retry_vs_e2e"}),
        ({"e2e.queued": 0, "e2e.delivered": 0, "e2e.deliveries_per_s": 0.0},
         {"e2e_vs_simpleworker", "e2e_vs_aiohttp", "isolation_ratio", "commands_per_delivery", "slow_vs_e2e",
          "retry_vs_e2e"}),
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
        ("latency.delivered", 6999, {"latency_p50_vs_light", "latency_p99_vs_light"}),
        ("latency.posted", 6990, {"latency_p50_vs_light", "latency_p99_vs_light"}),  # posts unanswered: no sample
        ("latency_light.delivered", 1499, {"latency_p50_vs_light", "latency_p99_vs_light"}),  # the reference's
        ("retry.attempted", 9999, {"retry_vs_e2e"}),
        ("e2e.delivered", 39999, {"e2e_vs_simpleworker", "e2e_vs_aiohttp", "isolation_ratio",
                                  "commands_per_delivery", "slow_vs_e2e", "retry_vs_e2e"}),
        ("slow.delivered", 7000, {"slow_vs_e2e", "slow_rss_mb"}),
        ("isolation.healthy_delivered", 26000, {"isolation_vs_control", "isolation_ratio"}),
        ("isolation.control_delivered", 26000, {"isolation_vs_control"}),
        ("accounts.healthy_delivered", 22000, {"accounts_vs_control"}),
        ("accounts.control_delivered", 22000, {"accounts_vs_control"}),
        ("reference.rq_simpleworker_x2.delivered", 799, {"e2e_vs_simpleworker"}),
        ("ingest.stored", 39999, {"ingest_vs_aiohttp"}),  # an acknowledged post not stored
        ("ingest.fixed_ok", 5599, {"ingest_p99_vs_saturation_p50"}),
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
        # The saturation run is the reference of the p99 too: a failed post there fails both.
        ("ingest.saturation_failed", 3, {"ingest_vs_aiohttp", "ingest_p99_vs_saturation_p50"}),
        ("ingest.fixed_failed", 1, {"ingest_p99_vs_saturation_p50"}),
        ("reference.aiohttp_loop_c50.failed", 2, {"e2e_vs_aiohttp", "ingest_vs_aiohttp"}),
        ("gateway.setup.failed_calls", 1, {t.name for t in gateway.GATEWAY_TARGETS}),
        ("gateway.setup.answers_not_byte_exact", 1, {t.name for t in gateway.GATEWAY_TARGETS}),
        ("gateway.after.counted_failed", 5, {"gateway_round_trips"}),
        ("gateway.after.soak_failed", 5, {"gateway_rss_growth_mb"}),
    ],
)  # fmt: skip
def test_failed_calls_are_not_met(dotted: str, value: int, targets: set[str]) -> None:
    assert not_met(put(good(), dotted, value)) == targets


@pytest.mark.parametrize(
    ("dotted", "targets"),
    [
        ("reference.aiohttp_loop_c50.per_s", {"e2e_vs_aiohttp", "ingest_vs_aiohttp"}),
        ("latency_light.p99_ms", {"latency_p99_vs_light"}),
        ("ingest.saturation_p50_ms", {"ingest_p99_vs_saturation_p50"}),
        ("retry.attempts_per_s", {"retry_vs_e2e"}),
        ("gateway.ratios.sim_w1_vs_sim_direct", {"gateway_sim_w1_vs_sim_direct"}),
        ("gateway.ratios.added_p50_vs_sim_p50", {"gateway_added_p50_vs_sim"}),
        ("isolation.vs_control", {"isolation_vs_control"}),
        ("slow.rss_mb", {"slow_rss_mb"}),
        ("gateway.setup.failed_calls", {t.name for t in gateway.GATEWAY_TARGETS}),
        ("reference.aiohttp_loop_c50.failed", {"e2e_vs_aiohttp", "ingest_vs_aiohttp"}),
    ],
)  # fmt: skip
def test_a_missing_figure_is_not_met(dotted: str, targets: set[str]) -> None:
    figures = good()
    *path, last = dotted.split(".")
    del lookup(figures, ".".join(path))[last]
    result = judged(figures)
    missed = {name: t for name, t in result.items() if not t["met"]}
    assert set(missed) == targets
    assert all("no figure" in t["why"] for t in missed.values())


def test_a_ratio_with_a_zero_side_is_missing_and_not_met() -> None:
    assert ratio(0.0, 100.0) is None and ratio(100.0, 0.0) is None and ratio(None, 1.0) is None
    assert ratio(50.0, 100.0) == 0.5
    figures = put(good(), "reference.aiohttp_loop_c50.per_s", 0.0)
    assert not_met(figures) == {"e2e_vs_aiohttp", "ingest_vs_aiohttp"}
    assert figures["ratios"]["e2e_vs_aiohttp"] is None
    assert figures["targets"]["e2e_vs_aiohttp"]["why"] == "no figure"


def test_the_ratios_are_of_the_same_runs_figures() -> None:
    figures = good()
    derive(figures)
    assert figures["ratios"] == {
        "ingest_vs_aiohttp": 0.47,  # 7,000 / 15,000
        "ingest_p99_vs_saturation_p50": 0.5,  # 5 / 10 ms
        "e2e_vs_simpleworker": 30.0,
        "e2e_vs_aiohttp": 0.6,
        "latency_p50_vs_light": 1.5,  # 6 / 4 ms
        "latency_p99_vs_light": 2.5,  # 20 / 8 ms
        "slow_vs_e2e": 0.78,
        "isolation": 0.94,
        "retry_vs_e2e": 0.89,
    }
    assert figures["redis"]["commands_per_delivery_with_ingest"] == 20.0
    assert figures["redis"]["bytes_per_event_after_delivery"] == 200


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
    figures = put(good(), "retry.attempts_per_s", 5000.0)  # 0.56 of end to end
    judged(figures)
    assert finish(figures, "") == 1
    lines = capsys.readouterr().out.strip().splitlines()
    counted = sum(1 for target in figures["targets"].values() if target["judged"])
    assert lines[-2] == f"verdict: NOT met, 1 of {counted} targets: retry_vs_e2e"
    last = orjson.loads(lines[-1])
    assert last["verdict"]["not_met"] == ["retry_vs_e2e"]
    assert last["targets"]["retry_vs_e2e"] == {
        "value": 0.56, "target": ">= 0.8", "met": False, "says": last["targets"]["retry_vs_e2e"]["says"],
        "why": "out of bound", "judged": True,
    }  # fmt: skip


def test_a_short_run_is_not_judged_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    figures = put(good(), "setup.mode", "short")
    put(figures, "e2e.delivered", 0)
    judged(figures)
    assert figures["verdict"]["judged"] is False and figures["verdict"]["met"] is False
    assert finish(figures, "") == 0
    assert capsys.readouterr().out.strip().splitlines()[-2].startswith("verdict: not judged (short run")


def test_exit_status_of_a_summary() -> None:
    met = judge_targets({"a": 1}, [Target("t", "a", ">=", 1, "a")])
    missed = judge_targets({"a": 0}, [Target("t", "a", ">=", 1, "a")])
    assert exit_status(summary(met, short=False)) == 0
    assert exit_status(summary(missed, short=False)) == 1
    assert exit_status(summary(missed, short=True)) == 0


@pytest.mark.parametrize(("value", "short", "status"), [(1, False, 0), (0, False, 1), (0, True, 0)])
def test_a_benchmark_s_report_ends_with_its_verdict_and_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, value: int, short: bool, status: int
) -> None:
    figures: dict[str, Any] = {"bench": {"a": value}}
    out = tmp_path / "figures.json"
    assert report(figures, [Target("t", "bench.a", ">=", 1, "a")], "the table", short=short, out=out) == status
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "the table" and lines[1].startswith("t ")
    assert lines[2] == verdict_line(figures["verdict"])
    assert orjson.loads(lines[3]) == orjson.loads(out.read_text()) == figures
    assert set(figures) == {"bench", "targets", "verdict"} and figures["targets"]["t"]["met"] is bool(value)


def test_a_scenario_s_report_under_its_name_reads_and_prints_its_figures_there(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The gateway scenario alone: its targets name "gateway.…" as in the whole run, and its JSON line nests
    # the same way, with its targets and verdict inside its own figures.
    figures: dict[str, Any] = {"a": 0}
    out = tmp_path / "figures.json"
    target = Target("t", "bench.a", ">=", 1, "a")
    assert report(figures, [target], "the table", short=False, out=out, under="bench") == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[2] == "verdict: NOT met, 1 of 1 targets: t"
    assert orjson.loads(lines[3]) == orjson.loads(out.read_text()) == {"bench": figures}
    assert set(figures) == {"a", "targets", "verdict"} and figures["targets"]["t"]["value"] == 0
