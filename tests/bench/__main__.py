"""``python -m tests.bench [--short] [--out FILE] [--appendfsync always|everysec]``: the benchmark.

Starts its own redis-server (append-only file), ``svcgw serve`` and
``svcgw worker`` processes, a sink and load generators, all on loopback;
runs the scenarios of ``docs/performance.md`` and the references (stock RQ
and a raw aiohttp loop) in the same run; prints a table, the targets
judged (:mod:`.verdict`: met only on a full sample of the work each names),
one line with the run's verdict and, as its last line, one JSON object with
every figure, the targets (``targets``) and the verdict (``verdict``). It
exits 1 when a target is not met.

``--short`` runs every scenario with a few hundred deliveries (a few seconds
each): it checks that the harness works, and its figures mean little. Its
targets are shown but not judged: it exits 0 whatever they are.
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

from . import gateway, memory, scenarios, verdict
from .scenarios import Bench, Plan
from .verdict import Need, Target, all_of, none, ratio

E2E_FULL = all_of("e2e.delivered", "e2e.queued")
TARGETS: list[Target] = [
    Target("ingest_per_s", "ingest.saturation_per_s", ">=", 3000, "posts acknowledged durable per second, saturation",
           (none("ingest.saturation_failed"), Need("ingest.stored", ">=", "ingest.acknowledged"))),
    Target("ingest_p99_ms_at_1000", "ingest.fixed_p99_ms", "<=", 50, "receiver p99 at 1,000 posts/s, every post 200",
           (*all_of("ingest.fixed_ok", "ingest.fixed_posts_due"), none("ingest.fixed_failed"))),
    Target("e2e_per_s", "e2e.deliveries_per_s", ">=", 1000, "signed deliveries per second, fast sink, all delivered",
           E2E_FULL),
    Target("e2e_vs_simpleworker", "ratios.e2e_vs_simpleworker", ">=", 4,
           "end to end / stock RQ SimpleWorker x2: both 2 processes, 100 destinations, middle 80 % of arrivals",
           (*E2E_FULL, *all_of("reference.rq_simpleworker_x2.delivered", "reference.rq_simpleworker_x2.jobs"))),
    Target("e2e_vs_aiohttp", "ratios.e2e_vs_aiohttp", ">=", 0.3,
           "end to end (2 worker processes, 100 destinations, middle 80 % of arrivals) / raw aiohttp loop "
           "(1 process, c=50, 8 destinations, whole run with warm-up)",
           (*E2E_FULL, Need("reference.aiohttp_loop_c50.requests", ">", 0),
            none("reference.aiohttp_loop_c50.failed"))),
    Target("latency_p50_ms", "latency.p50_ms", "<=", 10, "ingest to sink at half load, p50, every post delivered",
           (*all_of("latency.posted", "latency.posts_due"), *all_of("latency.delivered", "latency.posted"))),
    Target("latency_p99_ms", "latency.p99_ms", "<=", 100, "ingest to sink at half load, p99, every post delivered",
           (*all_of("latency.posted", "latency.posts_due"), *all_of("latency.delivered", "latency.posted"))),
    Target("slow_per_s", "slow.deliveries_per_s", ">=", 4000, "deliveries per second to 200 ms endpoints",
           all_of("slow.delivered", "slow.expected")),
    Target("slow_rss_mb", "slow.rss_mb", "<=", 1536, "RSS of all service processes, MB, 200 ms endpoints",
           all_of("slow.delivered", "slow.expected")),
    Target("isolation_vs_control", "isolation.vs_control", ">=", 0.9,
           "healthy deliveries/s with 1 destination in 10 hanging / the same deliveries to the 90 healthy alone, "
           "median of 5 alternating pairs",
           (*all_of("isolation.healthy_delivered", "isolation.healthy_expected"),
            *all_of("isolation.control_delivered", "isolation.healthy_expected"))),
    Target("isolation_ratio", "ratios.isolation", ">=", 0.9,
           "healthy deliveries/s with 1 destination in 10 hanging / end to end (scenario 2: other queue, "
           "100 healthy destinations)",
           (*E2E_FULL, *all_of("isolation.healthy_delivered", "isolation.healthy_expected"))),
    Target("accounts_vs_control", "accounts.vs_control", ">=", 0.9,
           "one account's deliveries/s while another account's 60 destinations hang (1 delivery in 4) / the "
           "same deliveries alone, median of 5 alternating pairs",
           (*all_of("accounts.healthy_delivered", "accounts.healthy_expected"),
            *all_of("accounts.control_delivered", "accounts.healthy_expected"))),
    Target("commands_per_delivery", "redis.commands_per_delivery", "<=", 20, "Redis commands per delivery (worker)",
           E2E_FULL),
    Target("retry_lateness_max_s", "retry.lateness_max_s", "<=", 1, "latest start of 10,000 retries due at once",
           all_of("retry.attempted", "retry.due_at_once")),
    *memory.targets(),
]  # fmt: skip


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
        step("one account hanging")
        figures["accounts"] = scenarios.accounts(bench)
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
    return figures


def judge(figures: dict[str, Any]) -> None:
    """Every target judged on ``figures`` (under ``targets``) and the run's one verdict (``verdict``)."""
    judged = verdict.judge(figures, TARGETS + gateway.GATEWAY_TARGETS)
    figures["targets"] = {j.name: j.as_json() for j in judged}
    figures["verdict"] = verdict.summary(judged, short=figures["setup"]["mode"] == "short")


def finish(figures: dict[str, Any], out: Path | None = None) -> int:
    """The last two lines of a run, the verdict then the JSON object; the exit status."""
    print(verdict.line(figures["verdict"]))
    line = orjson.dumps(figures).decode()
    if out is not None:
        out.write_text(line + "\n")
    print(line, flush=True)
    return verdict.exit_status(figures["verdict"])


def step(name: str) -> None:
    print(f"... {name}", file=sys.stderr, flush=True)


def table(figures: dict[str, Any]) -> str:
    ingest, e2e, lat = figures["ingest"], figures["e2e"], figures["latency"]
    slow, iso, retry, ref = figures["slow"], figures["isolation"], figures["retry"], figures["reference"]
    acc = figures["accounts"]
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
        ("3 200 ms endpoints", f"{slow['deliveries_per_s']:.0f} deliveries/s",
         f"RSS {slow['rss_mb']} MB, workers {slow['worker_cpu_us']} µs CPU per delivery"),
        ("4 isolation, 10% hang", f"{iso['healthy_per_s']:.0f} healthy/s",
         f"{figures['ratios']['isolation']} of end to end, {iso['vs_control']} of {iso['control_per_s']:.0f}/s"
         f" without the hanging ones (median of {iso['vs_control_rounds']})"),
        ("4 one account hanging", f"{acc['healthy_per_s']:.0f}/s the other account",
         f"{acc['vs_control']} of {acc['control_per_s']:.0f}/s alone (median of {acc['vs_control_rounds']})"),
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
    lines += verdict.rows(figures["targets"])
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
    judge(figures)
    print(table(figures))
    return finish(figures, args.out)


if __name__ == "__main__":
    sys.exit(main())
