"""``python -m tests.bench.probing [--before REF] [--pairs N] [--scenario isolation|accounts] [--cold] [--short]``:
healthy deliveries beside destinations that never answer, against the same deliveries alone, two trees
side by side.

The full benchmark's scenarios 4 (one destination in ten never answers) and 4b (one account's 60
destinations never answer, one delivery in four theirs), each as pairs of runs: the healthy
deliveries alone (the control), then the same beside the hanging ones, on the same Redis, sink and
destinations. Per tree (``after`` this checkout, ``before`` the ``--before`` commit, alternating
per round, each on a Redis of its own), ``--pairs`` pairs; per pair:

* the healthy deliveries' rate beside the hanging destinations and alone, and their ratio;
* the workers' and Redis's CPU per healthy delivery, both runs (from the workers' start to the
  last healthy delivery, read before the workers stop: their shutdown waits out what hangs);
* the requests the hanging destinations received, and the most one hanging destination had in
  flight at once after the run's first delivery timeout: each of its requests is held until it
  times out, so that is the most that arrived there within one timeout of each other;
* how long the run lasted, from the workers' start to the last healthy delivery.

A destination's probing is kept in Redis (``svcgw.delivery.breaker``), so from the second pair on the
hanging destinations are known to hang when the run starts, as they would be in service; the first
pair meets them fresh. ``--cold`` forgets that state before every run, so that each run meets them
fresh. Medians per tree; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from svcgw.storage.keys import PLAIN as keys

from . import verdict
from .gateway import Tree, before_tree
from .pipeline import TreeBench
from .scenarios import Plan, Tenant, rate_of
from .services import REPO
from .verdict import Need, Target

FIGURES = (
    "vs_control", "healthy_per_s", "control_per_s", "healthy_cpu_us", "control_cpu_us", "hanging_attempts",
    "hanging_in_flight_after_timeout", "seconds",
)  # fmt: skip

TARGETS = [
    Target("isolation_vs_control", "after.isolation.vs_control", ">=", 0.93,
           "healthy deliveries/s with 1 destination in 10 hanging / the same alone, median pair",
           (Need("after.isolation.undelivered", "==", 0),)),
    Target("accounts_vs_control", "after.accounts.vs_control", ">=", 0.93,
           "one account's deliveries/s beside another's 60 hanging destinations / the same alone, median pair",
           (Need("after.accounts.undelivered", "==", 0),)),
]  # fmt: skip


@dataclass(frozen=True)
class Run:
    per_s: float
    delivered: int
    cpu_us: float | None
    hanging_attempts: int
    hanging_in_flight: int  # the most one hanging destination had at once after the first timeout
    seconds: float


def _most_within(times: list[float], window: float) -> int:
    ordered = sorted(times)
    most, first = 0, 0
    for last, at in enumerate(ordered):
        while at - ordered[first] >= window:
            first += 1
        most = max(most, last - first + 1)
    return most


def _forget_probing(bench: TreeBench) -> None:
    client = bench.redis.client
    client.delete(keys.breakers, *client.keys(keys.parked("*")))


def _run(bench: TreeBench, tenants: list[Tenant], count: int, prefix: str, hanging: set[int], cold: bool) -> Run:
    if cold:
        _forget_probing(bench)
    bench.sink.reset()
    bench.fill(tenants, count, prefix)
    ports = {f"{prefix}{n}": tenants[n % len(tenants)].port for n in range(count)}
    expected = sum(1 for port in ports.values() if port not in hanging)
    timeout = bench.plan.delivery_timeout
    with bench.redis.no_aof_rewrite():
        redis_before = bench.redis.cpu_seconds()
        started = time.time()
        bench.start_workers()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and bench.sink.count("fast") < expected:
            time.sleep(0.05)
        ended = time.time()
        used = sum(worker.cpu_seconds() for worker in bench.workers) + bench.redis.cpu_seconds() - redis_before
        hanging_attempts = bench.sink.count("hang") if hanging else 0
        arrivals = bench.sink.arrivals()
        bench.stop_workers()
    bench.clear_queue()
    good = [(i, t) for i, t in arrivals if ports.get(i) not in hanging]
    by_port: dict[int, list[float]] = defaultdict(list)
    for i, t in arrivals:
        if ports.get(i) in hanging:
            by_port[ports[i]].append(t)
    first = min((min(ts) for ts in by_port.values()), default=0.0)
    # Each hanging request is held until it times out: arrivals within one timeout of each other were in
    # flight at once. Counted from one timeout after the first, when the first attempts have timed out.
    most = max((_most_within([t for t in ts if t >= first + timeout * 1.2], timeout * 0.95)
                for ts in by_port.values()), default=0)  # fmt: skip
    delivered = len({i for i, _ in good})
    return Run(round(rate_of([t for _, t in good]), 1), delivered,
               round(used / delivered * 1e6, 1) if delivered else None, hanging_attempts, most,
               round(ended - started, 2))  # fmt: skip


def scenario(bench: TreeBench, name: str, pairs: int, cold: bool) -> dict[str, Any]:
    """``pairs`` pairs of scenario 4 (``isolation``) or 4b (``accounts``) on ``bench``."""
    healthy = bench.fast[:90]
    if name == "isolation":
        hanging = bench.provision(bench.sink.listen("hang", 10))
        tenants = healthy[:45] + hanging[:5] + healthy[45:] + hanging[5:]
    else:
        hanging = bench.provision(bench.sink.listen("hang", 60))  # an account of their own
        tenants = [t for k in range(60) for t in (*(healthy[(3 * k + j) % 90] for j in range(3)), hanging[k])]
    count = bench.plan.isolation_deliveries
    expected = sum(1 for n in range(count) if tenants[n % len(tenants)] not in hanging)
    ports = {t.port for t in hanging}
    rounds: list[dict[str, Any]] = []
    for n in range(pairs):
        control = _run(bench, healthy, expected, f"{name[:3]}c{n}-", set(), cold)
        beside = _run(bench, tenants, count, f"{name[:3]}h{n}-", ports, cold)
        rounds.append({
            "vs_control": verdict.ratio(beside.per_s, control.per_s),
            "healthy_per_s": beside.per_s, "control_per_s": control.per_s,
            "healthy_cpu_us": beside.cpu_us, "control_cpu_us": control.cpu_us,
            "hanging_attempts": beside.hanging_attempts, "hanging_in_flight_after_timeout": beside.hanging_in_flight,
            "seconds": beside.seconds, "undelivered": (expected - beside.delivered) + (expected - control.delivered),
        })  # fmt: skip
    median = sorted(rounds, key=lambda r: r["vs_control"] or 0.0)[len(rounds) // 2]
    return {**median, "pairs": rounds, "undelivered": max(r["undelivered"] for r in rounds)}


def measure(tree: Tree, workdir: Path, names: list[str], pairs: int, cold: bool, short: bool) -> dict[str, Any]:
    bench = TreeBench(Plan(short=short), workdir, "always", tree=tree.path)
    bench.start(serve=False)
    try:
        return {name: scenario(bench, name, pairs, cold) for name in names}
    finally:
        bench.stop()


def summarise(rounds: list[dict[str, Any]], names: list[str]) -> dict[str, Any]:
    """Per tree and scenario: the median of the rounds' median pairs, every pair, the worst losses."""
    figures: dict[str, Any] = {"rounds": rounds}
    for tree in rounds[0]:
        figures[tree] = {}
        for name in names:
            runs = [r[tree][name] for r in rounds]
            figures[tree][name] = {
                f: round(statistics.median(v), 3) if (v := [run[f] for run in runs if run[f] is not None]) else None
                for f in FIGURES
            }
            every = [p for run in runs for p in run["pairs"]]
            figures[tree][name]["vs_control_all_pairs"] = [p["vs_control"] for p in every]
            figures[tree][name]["undelivered"] = max(run["undelivered"] for run in runs)
    return figures


def table(figures: dict[str, Any], names: list[str]) -> list[str]:
    trees = [n for n in ("before", "after") if n in figures]
    lines = [f"{'figure (median pair)':<44}" + "".join(f"{n:>12}" for n in trees)]
    for name in names:
        for f in FIGURES:
            lines.append(f"{name + ' ' + f:<44}" + "".join(f"{figures[t][name][f]!s:>12}" for t in trees))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.probing", description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="REF", help="also measure this commit (git archive), alternating")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--scenario", choices=("isolation", "accounts"), action="append")
    parser.add_argument("--cold", action="store_true", help="forget every destination's probing before each run")
    parser.add_argument("--short", action="store_true", help="one pair of each, a few hundred deliveries")
    args = parser.parse_args(argv)
    names = args.scenario or ["isolation", "accounts"]
    rounds, pairs = (1, 1) if args.short else (args.rounds, args.pairs)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="svcgw-bench-probing-") as tmp:
        workdir = Path(tmp)
        trees = [Tree("after", REPO)]
        if args.before:
            trees.insert(0, before_tree(workdir, args.before))
        measured: list[dict[str, Any]] = []
        for n in range(rounds):
            this: dict[str, Any] = {}
            for tree in trees if n % 2 == 0 else trees[::-1]:
                print(f"... round {n + 1} of {rounds}: {tree.name}", file=sys.stderr, flush=True)
                path = workdir / f"{tree.name}-{n}"
                path.mkdir()
                this[tree.name] = measure(tree, path, names, pairs, args.cold, args.short)
            measured.append(this)
    figures = summarise(measured, names)
    figures["setup"] = {"before": args.before, "rounds": rounds, "pairs": pairs, "cold": args.cold,
                        "elapsed_s": round(time.monotonic() - started, 1)}  # fmt: skip
    targets = [t for t in TARGETS if t.figure.split(".")[1] in names]
    return verdict.report(figures, targets, "\n".join(table(figures, names)), short=args.short, out=None)


if __name__ == "__main__":
    sys.exit(main())
