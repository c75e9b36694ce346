"""``python -m tests.bench.retries [--before REF] [--rounds N] [--due N] [--short]``: retries due at once
against the end-to-end rate of the same workers, two trees side by side.

The full benchmark's scenario 6 puts 10,000 deliveries in RQ's scheduled registry, all due at the
same second, and reads when each first attempt started. Its figure here is a rate: ``--due``
deliveries over the time from their due time to the start of the last first attempt, against the
end-to-end rate of the same tree's workers in the same measurement (the same number of deliveries
to the same 100 destinations, queued first in, first out). The issue's bound is 0.8.

One measurement of a tree, on a Redis of its own (``appendfsync always``, as the full run):

1. **end to end**: ``--due`` deliveries queued through the receiver's code (round robin over the
   sink's 100 destinations), then the tree's two workers drain them. Rate over the middle 80 % of
   the sink's arrivals; the workers' CPU per delivery from the moment both registered;
2. **due at once**: the same number queued, moved to the scheduled registry with one score, the
   workers started before it; figures: how long until every first attempt started, its p50, the
   rate that makes, the workers' and Redis's CPU per retry from the due time to the last arrival,
   Redis commands per retry, and how many times a retry went back to the scheduled registry
   without an attempt (``ZADD`` calls on it beyond the first).

Each round measures every tree once, the order swapped every round. Medians per tree; the last line
is one JSON object.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from svcgw.storage.keys import PLAIN as keys

from . import verdict
from .gateway import Tree
from .pipeline import TreeBench, alternating
from .scenarios import _MAKE_DUE, Plan, first_attempts, percentile, rate_of
from .services import cpu_seconds, wait_until
from .verdict import Need, Target

FIGURES = (
    "e2e_per_s", "e2e_worker_cpu_us", "due_promoted_s", "due_p50_s", "due_max_s", "due_per_s", "due_vs_e2e",
    "due_worker_cpu_us", "due_redis_cpu_us", "due_commands", "due_deferrals",
)  # fmt: skip

TARGETS = [
    Target("due_vs_e2e", "after.due_vs_e2e", ">=", 0.8,
           "retries due at once, attempted per second / end to end of the same workers, medians",
           (Need("after.unattempted", "==", 0),)),
]  # fmt: skip


def _worker_pids(bench: TreeBench) -> list[int]:
    from .services import _tree

    return [pid for w in bench.workers if w.proc is not None for pid in _tree(w.proc.pid)]


def measure(tree: Tree, workdir: Path, count: int, short: bool) -> dict[str, Any]:
    """End to end, then ``count`` retries due at once, of ``tree`` on a Redis of its own."""
    bench = TreeBench(Plan(short=short), workdir, "always", tree=tree.path)
    bench.start(serve=False)
    name = bench.settings.queue_name
    client = bench.redis.client
    try:
        # 1. end to end
        bench.fill(bench.fast, count, "e2e-")
        bench.sink.reset()
        bench.start_workers()
        wait_until(lambda: client.scard("rq:workers") == len(bench.workers), 30, "the workers registered")
        pids = _worker_pids(bench)
        worker0 = cpu_seconds(pids)
        arrivals = bench.drain(count, timeout=180)
        wait_until(lambda: client.llen(keys.rq.queue(name)) == 0 and client.zcard(keys.inflight(name)) == 0, 30,
                   "the queue drained")  # fmt: skip
        worker1 = cpu_seconds(pids)
        e2e_delivered = len({i for i, _ in arrivals})
        e2e = rate_of([t for _, t in arrivals])
        bench.stop_workers()
        bench.clear_queue()

        # 2. due at once
        bench.sink.reset()
        bench.fill(bench.fast, count, "due-")
        ids = [i.decode() for i in client.lrange(keys.rq.queue(name), 0, -1)]
        due = time.time() + 4.0
        client.register_script(_MAKE_DUE)(keys=[keys.rq.queue(name), keys.rq.scheduled(name)],
                                          args=[due, keys.rq.job("")])  # fmt: skip
        bench.start_workers()
        wait_until(lambda: client.scard("rq:workers") == len(bench.workers), 30, "the workers registered")
        pids = _worker_pids(bench)
        wait_until(lambda: time.time() >= due - 0.2, 30, "nearly the due time", interval=0.005)
        worker2, redis2, counts2 = cpu_seconds(pids), bench.redis.cpu_seconds(), bench.redis.command_counts()
        scheduled = keys.rq.scheduled(name)
        wait_until(lambda: time.time() >= due, 30, "the due time", interval=0.005)
        promoted_at = wait_until(lambda: time.time() if client.zcard(scheduled) == 0 else None, 60, "promotion",
                                 interval=0.005)  # fmt: skip
        due_arrivals = bench.drain(count, timeout=180)
        wait_until(lambda: client.llen(keys.rq.queue(name)) == 0 and client.zcard(keys.inflight(name)) == 0, 30,
                   "the queue drained")  # fmt: skip
        worker3, redis3, counts3 = cpu_seconds(pids), bench.redis.cpu_seconds(), bench.redis.command_counts()
        started = first_attempts(client, ids)
    finally:
        bench.stop()
    late = [max(at - due, 0.0) for at in started]
    longest = percentile(late, 100)
    per = max(len({i for i, _ in due_arrivals}), 1)
    commands = sum(counts3.values()) - sum(counts2.values())
    # The ZADD calls on the scheduled registry beyond none: each is a batch of jobs sent back unattempted.
    zadds = counts3.get("zadd", 0) - counts2.get("zadd", 0)
    due_per_s = round(count / longest, 1) if longest else None
    return {
        "e2e_delivered": e2e_delivered,
        "e2e_per_s": round(e2e, 1),
        "e2e_worker_cpu_us": round((worker1 - worker0) / max(e2e_delivered, 1) * 1e6),
        "attempted": len(started),
        "unattempted": count - len(started),
        "due_promoted_s": round(promoted_at - due, 3),
        "due_p50_s": round(percentile(late, 50) or 0.0, 3),
        "due_max_s": round(longest, 3) if longest is not None else None,
        "due_per_s": due_per_s,
        "due_vs_e2e": verdict.ratio(due_per_s, round(e2e, 1)),
        "due_worker_cpu_us": round((worker3 - worker2) / per * 1e6),
        "due_redis_cpu_us": round((redis3 - redis2) / per * 1e6),
        "due_commands": round(commands / per, 2),
        "due_deferrals": zadds,
    }


def summarise(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Medians per tree (a figure missing in a round is left out of its median), the worst losses, ratios."""
    figures: dict[str, Any] = {"rounds": rounds}
    for name in rounds[0]:
        runs = [r[name] for r in rounds]
        figures[name] = {
            f: round(statistics.median(values), 3) if (values := [run[f] for run in runs if run[f] is not None])
            else None
            for f in FIGURES
        }
        figures[name]["unattempted"] = max(run["unattempted"] for run in runs)
    if "before" in figures:
        figures["ratios"] = {f: verdict.ratio(figures["after"][f], figures["before"][f]) for f in FIGURES}
    return figures


def table(figures: dict[str, Any]) -> list[str]:
    names = [n for n in ("before", "after") if n in figures]
    lines = [f"{'figure (median)':<22}" + "".join(f"{n:>12}" for n in names)]
    for f in FIGURES:
        lines.append(f"{f:<22}" + "".join(f"{figures[n][f]!s:>12}" for n in names))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.retries", description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="REF", help="also measure this commit (git archive), alternating")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--due", type=int, default=10000, help="deliveries due at once (and drained end to end)")
    parser.add_argument("--short", action="store_true", help="one round of 300 (a smoke test)")
    args = parser.parse_args(argv)
    rounds, count = (1, 300) if args.short else (args.rounds, args.due)
    started = time.monotonic()
    measured = alternating("retries", args.before, rounds, lambda tree, path: measure(tree, path, count, args.short))
    figures = summarise(measured)
    figures["setup"] = {"before": args.before, "rounds": rounds, "due": count,
                        "elapsed_s": round(time.monotonic() - started, 1)}  # fmt: skip
    return verdict.report(figures, TARGETS, "\n".join(table(figures)), short=args.short, out=None)


if __name__ == "__main__":
    sys.exit(main())
