"""``python -m tests.bench [--short] [--out FILE] [--appendfsync always|everysec]``: the benchmark.

Starts its own redis-server (append-only file), ``svcgw serve`` and
``svcgw worker`` processes, a sink and load generators, all on loopback;
runs the scenarios of ``docs/performance.md`` and the references (stock RQ
and a raw aiohttp loop) in the same run; prints a table and, as its last
line, one JSON object with every figure and the targets.

``--short`` runs every scenario with a few hundred deliveries (a few seconds
each): it checks that the harness works, and its figures mean little.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from . import gateway, memory, scenarios
from .scenarios import Bench, Plan

# name: (figure, comparison, target, what it says)
TARGETS: list[tuple[str, str, str, float, str]] = [
    ("ingest_per_s", "ingest.saturation_per_s", ">=", 3000, "posts acknowledged durable per second"),
    ("ingest_p99_ms_at_1000", "ingest.fixed_p99_ms", "<=", 50, "receiver p99 at 1,000 posts/s"),
    ("e2e_per_s", "e2e.deliveries_per_s", ">=", 1000, "signed deliveries per second, fast sink"),
    ("e2e_vs_simpleworker", "ratios.e2e_vs_simpleworker", ">=", 4, "end to end / stock SimpleWorker x2"),
    ("e2e_vs_aiohttp", "ratios.e2e_vs_aiohttp", ">=", 0.3, "end to end / raw aiohttp loop"),
    ("latency_p50_ms", "latency.p50_ms", "<=", 10, "ingest to sink at half load, p50"),
    ("latency_p99_ms", "latency.p99_ms", "<=", 100, "ingest to sink at half load, p99"),
    ("slow_per_s", "slow.deliveries_per_s", ">=", 500, "deliveries per second to 200 ms endpoints"),
    ("slow_rss_mb", "slow.rss_mb", "<=", 1536, "RSS of all service processes, MB"),
    ("isolation_ratio", "ratios.isolation", ">=", 0.9, "healthy throughput with 10% hanging / end to end"),
    ("commands_per_delivery", "redis.commands_per_delivery", "<=", 20, "Redis commands per delivery (worker)"),
    ("retry_lateness_max_s", "retry.lateness_max_s", "<=", 1, "latest start of 10,000 retries due at once"),
    *memory.targets(),
]


def lookup(figures: dict[str, Any], dotted: str) -> Any:
    value: Any = figures
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def judge(figures: dict[str, Any]) -> dict[str, Any]:
    verdicts = {}
    for name, path, comparison, target, _ in TARGETS + gateway.GATEWAY_TARGETS:
        value = lookup(figures, path)
        met = None
        if isinstance(value, int | float):
            met = value >= target if comparison == ">=" else value <= target
        verdicts[name] = {"value": value, "target": f"{comparison} {target:g}", "met": met}
    return verdicts


def ratio(a: float | None, b: float | None) -> float | None:
    if not a or not b:
        return None
    return round(a / b, 2)


def run(plan: Plan, appendfsync: str, workdir: Path) -> dict[str, Any]:
    started = time.monotonic()
    bench = Bench(plan, workdir, appendfsync)
    figures: dict[str, Any] = {}
    bench.start()
    try:
        step("ingest")
        figures["ingest"] = scenarios.ingest(bench)
        step("end to end")
        figures["e2e"] = scenarios.end_to_end(bench, figures["ingest"]["stored"])
        figures["sustained"] = scenarios.sustained(bench)
        half = figures["sustained"]["delivered_per_s"] / 2
        figures["latency"] = scenarios.latency(bench, max(half, 50.0))
        step("slow endpoints")
        figures["slow"] = scenarios.slow(bench)
        step("isolation")
        figures["isolation"] = scenarios.isolation(bench)
        step("retry timing")
        figures["retry"] = scenarios.retry_timing(bench)
        bench.stop_workers()
        step("gateway")
        figures["gateway"] = gateway.in_bench(bench)
        step("references")
        figures["reference"] = {
            "aiohttp_loop_c50": scenarios.aiohttp_reference(bench),
            "rq_simpleworker_x2": scenarios.rq_reference(bench, forking=False),
            "rq_forking_worker": scenarios.rq_reference(bench, forking=True),
        }
        machine = {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "redis": bench.redis.version(),
        }
    finally:
        bench.stop()
    # On a Redis, sink and workers of its own, once the others have stopped.
    step("memory")
    figures["memory"] = memory.run(plan, workdir)
    e2e = figures["e2e"]["deliveries_per_s"]
    reference = figures["reference"]
    figures["redis"] = {
        "commands_per_delivery": figures["e2e"]["commands_per_delivery"],
        "commands_per_post": figures["ingest"]["commands_per_post"],
        "commands_per_delivery_with_ingest": round(
            figures["e2e"]["commands_per_delivery"] + figures["ingest"]["commands_per_post"], 2
        ),
        "bytes_per_event_logged": figures["ingest"]["bytes_per_event_logged"],
        "bytes_per_event_after_delivery": figures["ingest"]["bytes_per_event_logged"]
        + figures["e2e"]["bytes_per_event_delivered_change"],
        "stock_rq_commands_per_job": reference["rq_simpleworker_x2"]["commands_per_job"],
        "stock_rq_commands_per_enqueue": reference["rq_simpleworker_x2"]["commands_per_enqueue"],
    }
    figures["ratios"] = {
        "e2e_vs_simpleworker": ratio(e2e, reference["rq_simpleworker_x2"]["per_s"]),
        "e2e_vs_aiohttp": ratio(e2e, reference["aiohttp_loop_c50"]["per_s"]),
        "isolation": ratio(figures["isolation"]["healthy_per_s"], e2e),
    }
    figures["setup"] = {
        "mode": "short" if plan.short else "full",
        "machine": machine,
        "appendfsync": appendfsync,
        "worker_processes": plan.workers,
        "http_workers": plan.http_workers,
        "delivery_concurrency": bench.settings.delivery_concurrency,
        "destination_concurrency": bench.settings.destination_concurrency,
        "delivery_timeout_s": plan.delivery_timeout,
        "load_generator": figures["ingest"]["generator"],
        "elapsed_s": round(time.monotonic() - started, 1),
        "notes": bench.log,
    }
    figures["targets"] = judge(figures)
    return figures


def step(name: str) -> None:
    print(f"... {name}", file=sys.stderr, flush=True)


def table(figures: dict[str, Any]) -> str:
    ingest, e2e, lat = figures["ingest"], figures["e2e"], figures["latency"]
    slow, iso, retry, ref = figures["slow"], figures["isolation"], figures["retry"], figures["reference"]
    redis, sus = figures["redis"], figures["sustained"]
    rows = [
        ("1 ingest, fixed rate", f"{ingest['fixed_ok_per_s']:.0f}/s acked of {ingest['fixed_rate']:.0f}/s",
         f"p50 {ingest['fixed_p50_ms']} ms, p99 {ingest['fixed_p99_ms']} ms"),
        ("1 ingest, saturation", f"{ingest['saturation_per_s']:.0f}/s acked ({ingest['generator']})",
         f"p50 {ingest['saturation_p50_ms']} ms, p99 {ingest['saturation_p99_ms']} ms"),
        ("2 end to end", f"{e2e['deliveries_per_s']:.0f} deliveries/s", f"{e2e['delivered']} of {e2e['queued']}"),
        ("2 posting and delivering", f"{sus['delivered_per_s']:.0f} deliveries/s",
         f"while {sus['posted_per_s']:.0f} posts/s acked"),
        ("2 latency at half that", f"at {lat['rate']:.0f}/s", f"p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms"),
        ("3 200 ms endpoints", f"{slow['deliveries_per_s']:.0f} deliveries/s", f"RSS {slow['rss_mb']} MB"),
        ("4 isolation, 10% hang", f"{iso['healthy_per_s']:.0f} healthy/s",
         f"{figures['ratios']['isolation']} of end to end, {iso['vs_control']} of {iso['control_per_s']:.0f}/s"
         " without the hanging ones"),
        ("5 Redis commands", f"{redis['commands_per_delivery']} per delivery",
         f"+{redis['commands_per_post']} per post; stock RQ {redis['stock_rq_commands_per_job']}"
         f" + {redis['stock_rq_commands_per_enqueue']}"),
        ("5 Redis memory", f"{redis['bytes_per_event_logged']} B/event logged",
         f"{redis['bytes_per_event_after_delivery']} B/event after delivery"),
        *memory.table_rows(figures["memory"]),
        ("6 retries due at once", f"{retry['due_at_once']}, promoted in {retry['promoted_within_s']} s",
         f"late p50 {retry['lateness_p50_s']} s, p99 {retry['lateness_p99_s']} s, "
         f"max {retry['lateness_max_s']} s"),
        ("ref aiohttp loop c=50", f"{ref['aiohttp_loop_c50']['per_s']:.0f}/s", ""),
        ("ref rq SimpleWorker x2", f"{ref['rq_simpleworker_x2']['per_s']:.0f}/s", ""),
        ("ref rq worker (forking)", f"{ref['rq_forking_worker']['per_s']:.1f}/s", ""),
    ]  # fmt: skip
    width = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(width[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    lines += ["", gateway.gateway_table(figures["gateway"]), ""]
    for name, verdict in figures["targets"].items():
        mark = {True: "met", False: "NOT met", None: "n/a"}[verdict["met"]]
        lines.append(f"{name:<24} {verdict['value']!s:>10}  target {verdict['target']:<8} {mark}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="a few seconds per scenario (smoke test)")
    parser.add_argument("--appendfsync", choices=("always", "everysec"), default="always")
    parser.add_argument("--out", type=Path, help="also write the JSON object to this file")
    args = parser.parse_args(argv)
    plan = Plan(short=args.short)
    with tempfile.TemporaryDirectory(prefix="svcgw-bench-") as workdir:
        figures = run(plan, args.appendfsync, Path(workdir))
    print(table(figures))
    line = orjson.dumps(figures).decode()
    if args.out is not None:
        args.out.write_text(line + "\n")
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
