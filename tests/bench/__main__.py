"""``python -m tests.bench [--short] [--out FILE] [--appendfsync always|everysec]``: the benchmark.

Starts its own redis-server (append-only file), ``svcgw serve`` and
``svcgw worker`` processes, a sink and load generators, all on loopback;
runs the scenarios of ``docs/performance.md`` and the references (a raw
aiohttp loop and stock RQ) in the same run; prints each step's time as it
ends, a table, the targets judged (:mod:`.verdict`: met only on a full
sample of the work each names), one line with the run's verdict and, as its
last line, one JSON object with every figure, the targets (``targets``) and
the verdict (``verdict``). It exits 1 when a target is not met.

Every rate and time a target judges is a ratio to a reference measured in
the same run (:func:`derive`), so that the verdict does not move with the
machine's speed; the full run's work is sized in seconds of this run's own
rates (:class:`.scenarios.Plan`), so that it takes about as long on a slow
machine as on a fast one: under ten minutes on two shared cores.

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

from . import gateway, memory, scenarios, verdict
from .scenarios import Bench, Plan
from .verdict import Need, Target, all_of, lookup, none, ratio

E2E_FULL = all_of("e2e.delivered", "e2e.queued")
AIOHTTP_FULL = (Need("reference.aiohttp_loop_c50.requests", ">", 0), none("reference.aiohttp_loop_c50.failed"))
LATENCY_FULL = (*all_of("latency.posted", "latency.posts_due"), *all_of("latency.delivered", "latency.posted"),
                *all_of("latency_light.posted", "latency_light.posts_due"),
                *all_of("latency_light.delivered", "latency_light.posted"))  # fmt: skip

# Every rate and time is judged as a ratio to a reference measured in the same run, so that a
# machine twice as fast or twice as slow gives the same verdict; where each bound comes from is in
# docs/performance.md, "Where the bounds come from".
# Counts, bytes and megabytes are not speeds: they keep their bounds.
TARGETS: list[Target] = [
    Target("ingest_vs_aiohttp", "ratios.ingest_vs_aiohttp", ">=", 0.4,
           "posts acknowledged durable per second at saturation / raw aiohttp loop",
           (none("ingest.saturation_failed"), Need("ingest.stored", ">=", "ingest.acknowledged"), *AIOHTTP_FULL)),
    Target("ingest_p99_vs_saturation_p50", "ratios.ingest_p99_vs_saturation_p50", "<=", 4.2,
           "receiver p99 at a fifth of this run's saturation / receiver p50 at saturation, every post 200",
           (*all_of("ingest.fixed_ok", "ingest.fixed_posts_due"), none("ingest.fixed_failed"),
            none("ingest.saturation_failed"))),
    # Reported, not judged: the same code reads 0.39 to 0.57 on different machines. End to end is
    # judged against stock RQ of the same run (next), and the engine's own CPU per delivery against a
    # named commit (tests.bench.engine --before).
    Target("e2e_vs_aiohttp", "ratios.e2e_vs_aiohttp", ">=", 0.55,
           "end to end (2 worker processes, 100 destinations, middle 80 % of arrivals) / raw aiohttp loop "
           "(1 process, c=50, 8 destinations, whole run with warm-up)", (*E2E_FULL, *AIOHTTP_FULL), judged=False),
    Target("e2e_vs_simpleworker", "ratios.e2e_vs_simpleworker", ">=", 4,
           "end to end / stock RQ SimpleWorker x2: both 2 processes, 100 destinations, middle 80 % of arrivals",
           (*E2E_FULL, *all_of("reference.rq_simpleworker_x2.delivered", "reference.rq_simpleworker_x2.jobs"))),
    Target("latency_p50_vs_light", "ratios.latency_p50_vs_light", "<=", 4.3,
           "ingest to sink p50 at half the sustained rate / at a tenth of it, every post delivered", LATENCY_FULL),
    Target("latency_p99_vs_light", "ratios.latency_p99_vs_light", "<=", 22,
           "ingest to sink p99 at half the sustained rate / at a tenth of it, every post delivered", LATENCY_FULL),
    Target("slow_vs_e2e", "ratios.slow_vs_e2e", ">=", 0.54,
           "deliveries per second to 200 ms endpoints / end to end to the fast sink",
           (*all_of("slow.delivered", "slow.expected"), *E2E_FULL)),
    Target("slow_rss_mb", "slow.rss_mb", "<=", 1536, "RSS of all service processes, MB, 200 ms endpoints",
           all_of("slow.delivered", "slow.expected")),
    Target("isolation_vs_control", "isolation.vs_control", ">=", 0.93,
           "healthy deliveries/s with 1 destination in 10 hanging / the same deliveries to the 90 healthy alone, "
           "median of 5 alternating pairs",
           (*all_of("isolation.healthy_delivered", "isolation.healthy_expected"),
            *all_of("isolation.control_delivered", "isolation.healthy_expected"))),
    Target("isolation_ratio", "ratios.isolation", ">=", 0.9,
           "healthy deliveries/s with 1 destination in 10 hanging / end to end (scenario 2: other queue, "
           "100 healthy destinations)",
           (*E2E_FULL, *all_of("isolation.healthy_delivered", "isolation.healthy_expected"))),
    Target("accounts_vs_control", "accounts.vs_control", ">=", 0.93,
           "one account's deliveries/s while another account's 60 destinations hang (1 delivery in 4) / the "
           "same deliveries alone, median of 5 alternating pairs",
           (*all_of("accounts.healthy_delivered", "accounts.healthy_expected"),
            *all_of("accounts.control_delivered", "accounts.healthy_expected"))),
    Target("commands_per_delivery", "redis.commands_per_delivery", "<=", 20, "Redis commands per delivery (worker)",
           E2E_FULL),
    Target("retry_vs_e2e", "ratios.retry_vs_e2e", ">=", 0.8,
           "10,000 retries due at once: attempts started per second from the due time to the last one / end to end",
           (*all_of("retry.attempted", "retry.due_at_once"), *E2E_FULL)),
    *memory.targets(),
]  # fmt: skip


class Steps:
    """The run's steps as they go (``... name`` on stderr) and how long each took."""

    def __init__(self) -> None:
        self.elapsed: dict[str, float] = {}
        self._name: str | None = None
        self._started = 0.0

    def __call__(self, name: str) -> None:
        self.end()
        print(f"... {name}", file=sys.stderr, flush=True)
        self._name, self._started = name, time.monotonic()

    def end(self) -> None:
        if self._name is not None:
            seconds = round(time.monotonic() - self._started, 1)
            self.elapsed[self._name] = seconds
            print(f"    {self._name}: {seconds} s", file=sys.stderr, flush=True)
        self._name = None


def run(plan: Plan, appendfsync: str, workdir: Path) -> dict[str, Any]:
    started = time.monotonic()
    load_average_at_start = [round(x, 2) for x in os.getloadavg()]
    step = Steps()
    step("start")
    bench = Bench(plan, workdir, appendfsync)
    figures: dict[str, Any] = {"reference": {}}
    bench.start()
    try:
        # The raw loop in three samples around the two scenarios judged against it, its median the
        # reference: the machine's speed drifts within a run (scenarios.median_sample).
        step("aiohttp loop")
        loop = [scenarios.aiohttp_reference(bench)]
        step("ingest")
        figures["ingest"] = scenarios.ingest(bench)
        step("aiohttp loop, again")
        loop.append(scenarios.aiohttp_reference(bench))
        step("end to end")
        figures["e2e"] = scenarios.end_to_end(bench, figures["ingest"]["stored"])
        step("aiohttp loop, last")
        loop.append(scenarios.aiohttp_reference(bench))
        figures["reference"]["aiohttp_loop_c50"] = scenarios.median_sample(loop)
        step("posting and delivering")
        figures["sustained"] = scenarios.sustained(bench)
        step("latency")
        sustained = figures["sustained"]["delivered_per_s"]
        figures["latency_light"] = scenarios.latency(
            bench, max(sustained * plan.light_fraction, 20.0), plan.light_latency_seconds, "light-"
        )
        figures["latency"] = scenarios.latency(bench, max(sustained / 2, 50.0), plan.latency_seconds, "lat-")
        e2e = figures["e2e"]["deliveries_per_s"]
        step("slow endpoints")
        figures["slow"] = scenarios.slow(bench, plan.slow_deliveries(e2e))
        pair_healthy = plan.pair_healthy(e2e)
        step("isolation")
        figures["isolation"] = scenarios.isolation(bench, pair_healthy)
        step("one account hanging")
        figures["accounts"] = scenarios.accounts(bench, pair_healthy)
        step("retry timing")
        figures["retry"] = scenarios.retry_timing(bench)
        bench.stop_workers()
        step("gateway")
        figures["gateway"] = gateway.in_bench(bench)
        step("stock RQ")
        figures["reference"]["rq_simpleworker_x2"] = scenarios.rq_reference(bench, forking=False)
        figures["reference"]["rq_forking_worker"] = scenarios.rq_reference(bench, forking=True)
        machine = {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "redis": bench.redis.version(),
            # Other work on the machine (1, 5 and 15 minutes), before the run and at its end.
            "load_average_at_start": load_average_at_start,
        }
    finally:
        bench.stop()
    # On a Redis, sink and workers of its own, once the others have stopped.
    step("memory")
    figures["memory"] = memory.run(plan, workdir)
    step.end()
    machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    derive(figures)
    figures["setup"] = {
        "mode": "short" if plan.short else "full",
        "machine": machine,
        "appendfsync": appendfsync,
        "worker_processes": plan.workers,
        "http_workers": plan.http_workers,
        "delivery_concurrency": bench.settings.delivery_concurrency,
        "destination_concurrency": bench.settings.destination_concurrency,
        "delivery_timeout_s": plan.delivery_timeout,
        "pair_healthy_deliveries": pair_healthy,
        "load_generator": figures["ingest"]["generator"],
        "elapsed_s": round(time.monotonic() - started, 1),
        "elapsed_by_step_s": step.elapsed,
        "notes": bench.log,
    }
    return figures


def derive(figures: dict[str, Any]) -> None:
    """The figures worked out from those measured: Redis's work per delivery and per post
    (``redis``), and every ratio a target judges (``ratios``), each to a reference of the same run.

    A figure that is missing makes what is worked out from it missing (None), never an error: the
    target on it is then not met.
    """

    def get(dotted: str) -> Any:
        return lookup(figures, dotted)

    def total(a: str, b: str) -> float | None:
        left, right = get(a), get(b)
        return None if left is None or right is None else round(left + right, 2)

    e2e, aiohttp = get("e2e.deliveries_per_s"), get("reference.aiohttp_loop_c50.per_s")
    figures["redis"] = {
        "commands_per_delivery": get("e2e.commands_per_delivery"),
        "commands_per_post": get("ingest.commands_per_post"),
        "commands_per_delivery_with_ingest": total("e2e.commands_per_delivery", "ingest.commands_per_post"),
        "bytes_per_event_logged": get("ingest.bytes_per_event_logged"),
        "bytes_per_event_after_delivery": total(
            "ingest.bytes_per_event_logged", "e2e.bytes_per_event_delivered_change"
        ),
        "stock_rq_commands_per_job": get("reference.rq_simpleworker_x2.commands_per_job"),
        "stock_rq_commands_per_enqueue": get("reference.rq_simpleworker_x2.commands_per_enqueue"),
    }
    figures["ratios"] = {
        "ingest_vs_aiohttp": ratio(get("ingest.saturation_per_s"), aiohttp),
        "ingest_p99_vs_saturation_p50": ratio(get("ingest.fixed_p99_ms"), get("ingest.saturation_p50_ms")),
        "e2e_vs_simpleworker": ratio(e2e, get("reference.rq_simpleworker_x2.per_s")),
        "e2e_vs_aiohttp": ratio(e2e, aiohttp),
        "latency_p50_vs_light": ratio(get("latency.p50_ms"), get("latency_light.p50_ms")),
        "latency_p99_vs_light": ratio(get("latency.p99_ms"), get("latency_light.p99_ms")),
        "slow_vs_e2e": ratio(get("slow.deliveries_per_s"), e2e),
        "isolation": ratio(get("isolation.healthy_per_s"), e2e),
        "retry_vs_e2e": ratio(get("retry.attempts_per_s"), e2e),
    }


def finish(figures: dict[str, Any], table: str, out: Path | None = None) -> int:
    """The run's ending (:func:`.verdict.report`): every target judged, ``table``, the targets' rows, the
    verdict line and the JSON object; the exit status."""
    targets = TARGETS + gateway.GATEWAY_TARGETS
    return verdict.report(figures, targets, table, short=figures["setup"]["mode"] == "short", out=out)


def table(figures: dict[str, Any]) -> str:
    ingest, e2e, lat, light = figures["ingest"], figures["e2e"], figures["latency"], figures["latency_light"]
    slow, iso, retry, ref = figures["slow"], figures["isolation"], figures["retry"], figures["reference"]
    acc, ratios = figures["accounts"], figures["ratios"]
    redis, sus = figures["redis"], figures["sustained"]
    rows = [
        ("ref aiohttp loop c=50", f"{ref['aiohttp_loop_c50']['per_s']:.0f}/s",
         "the reference of rows 1 and 2: median of " + ", ".join(f"{x:.0f}" for x in ref["aiohttp_loop_c50"]
                                                                  .get("samples_per_s", []))),
        ("1 ingest, saturation", f"{ingest['saturation_per_s']:.0f}/s acked ({ingest['generator']})",
         f"{ratios['ingest_vs_aiohttp']} of the aiohttp loop; p50 {ingest['saturation_p50_ms']} ms, "
         f"p99 {ingest['saturation_p99_ms']} ms"),
        ("1 ingest, a fifth of that", f"{ingest['fixed_ok_per_s']:.0f}/s acked of {ingest['fixed_rate']:.0f}/s",
         f"p50 {ingest['fixed_p50_ms']} ms, p99 {ingest['fixed_p99_ms']} ms "
         f"({ratios['ingest_p99_vs_saturation_p50']} of the p50 at saturation)"),
        ("2 end to end", f"{e2e['deliveries_per_s']:.0f} deliveries/s",
         f"{ratios['e2e_vs_aiohttp']} of the aiohttp loop, {ratios['e2e_vs_simpleworker']}x stock RQ; "
         f"{e2e['delivered']} of {e2e['queued']}"),
        ("2 posting and delivering", f"{sus['delivered_per_s']:.0f} deliveries/s",
         f"while {sus['posted_per_s']:.0f} posts/s acked"),
        ("2 latency at a tenth", f"at {light['rate']:.0f}/s", f"p50 {light['p50_ms']} ms, p99 {light['p99_ms']} ms"),
        ("2 latency at half", f"at {lat['rate']:.0f}/s",
         f"p50 {lat['p50_ms']} ms ({ratios['latency_p50_vs_light']}x), p99 {lat['p99_ms']} ms "
         f"({ratios['latency_p99_vs_light']}x)"),
        ("3 200 ms endpoints", f"{slow['deliveries_per_s']:.0f} deliveries/s",
         f"{ratios['slow_vs_e2e']} of end to end; RSS {slow['rss_mb']} MB, workers {slow['worker_cpu_us']} µs "
         "CPU per delivery"),
        ("4 isolation, 10% hang", f"{iso['healthy_per_s']:.0f} healthy/s",
         f"{iso['vs_control']} of {iso['control_per_s']:.0f}/s without the hanging ones (median of "
         f"{iso['vs_control_rounds']}); {ratios['isolation']} of end to end"),
        ("4 one account hanging", f"{acc['healthy_per_s']:.0f}/s the other account",
         f"{acc['vs_control']} of {acc['control_per_s']:.0f}/s alone (median of {acc['vs_control_rounds']})"),
        ("5 Redis commands", f"{redis['commands_per_delivery']} per delivery",
         f"+{redis['commands_per_post']} per post; stock RQ {redis['stock_rq_commands_per_job']}"
         f" + {redis['stock_rq_commands_per_enqueue']}"),
        ("5 Redis memory", f"{redis['bytes_per_event_logged']} B/event logged",
         f"{redis['bytes_per_event_after_delivery']} B/event after delivery"),
        ("6 retries due at once", f"{retry['due_at_once']}, {retry['attempts_per_s']} attempts/s",
         f"{ratios['retry_vs_e2e']} of end to end; promoted in {retry['promoted_within_s']} s, late p50 "
         f"{retry['lateness_p50_s']} s, max {retry['lateness_max_s']} s"),
        *memory.table_rows(figures["memory"]),
        ("ref rq SimpleWorker x2", f"{ref['rq_simpleworker_x2']['per_s']:.0f}/s", ""),
        ("ref rq worker (forking)", f"{ref['rq_forking_worker']['per_s']:.1f}/s", ""),
    ]  # fmt: skip
    width = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(width[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    lines += ["", gateway.gateway_table(figures["gateway"]), ""]
    setup = figures["setup"]
    steps = ", ".join(f"{name} {seconds:g} s" for name, seconds in setup.get("elapsed_by_step_s", {}).items())
    # A blank line, then the targets' rows (printed by verdict.report).
    lines += [f"elapsed {setup['elapsed_s']:g} s: {steps}", ""]
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
    return finish(figures, table(figures), args.out)


if __name__ == "__main__":
    sys.exit(main())
