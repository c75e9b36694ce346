"""``python -m tests.bench.pipeline [--before REF] [--rounds N] [--seconds S] [--short]``: ingest and
delivery of two trees side by side.

What a change on the hot path of events costs, against a reference commit in the same run: each
round measures every tree once, the order swapped every round (``before`` then ``after``, then
``after`` then ``before``), each on a Redis of its own with the append-only file and
``appendfsync always``, as the full benchmark (docs/performance.md, "Method").

One measurement of a tree:

1. **ingest**: its ``svcgw serve`` (two HTTP workers) and no worker; wrk posts the benchmark's
   84-byte post for ``--seconds`` at 64 connections over 100 receivers. Figures: posts
   acknowledged per second, and per post stored: the server's CPU (every process of it), Redis's
   CPU, Redis commands, Redis bytes;
2. **delivery**: its two ``svcgw worker`` processes drain what was stored to the sink's 100
   destinations. Figures: deliveries per second (middle 80 % of arrivals), and per delivery: the
   workers' CPU from the moment both are registered (their start-up left out), Redis's CPU and
   commands; Redis bytes per event once everything is delivered (what the log's 24 h keep).

Rates move with whatever else the two cores run; CPU and bytes per event much less, which is why
they are reported beside the rates. Every tree's figures are the medians over the rounds, then
``after / before`` of those medians; beside them, the median of each round's own ``after /
before`` (``paired``): the two trees of a round run one after the other, so a machine whose speed
drifts from round to round moves both sides of a round's ratio alike. The last line is one JSON
object; before it, one verdict line: the after tree delivered every stored event in every round,
and kept at least 0.9 of the before tree's end-to-end rate, round by round (issue: the lean key
layout keeps end-to-end throughput within 10 %).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from svcgw.storage.keys import PLAIN as keys
from tests.support import free_port

from . import verdict
from .gateway import Tree, TreeRole, before_tree
from .scenarios import Bench, Plan, rate_of, saturate_with_wrk
from .services import REPO, _tree, cpu_seconds, wait_for_listeners, wait_until, wrk_path
from .verdict import Need, Target

FIGURES = (
    "ingest_per_s", "serve_cpu_us_per_post", "redis_cpu_us_per_post", "commands_per_post", "bytes_per_post_logged",
    "deliveries_per_s", "worker_cpu_us_per_delivery", "redis_cpu_us_per_delivery", "commands_per_delivery",
    "bytes_per_event_after_delivery",
)  # fmt: skip

TARGETS = [
    Target("e2e_after_vs_before", "paired.deliveries_per_s", ">=", 0.9,
           "deliveries/s of this tree / the reference's, each round's, median, same run",
           (Need("after.undelivered", "==", 0), Need("before.undelivered", "==", 0))),
]  # fmt: skip


@dataclass
class TreeBench(Bench):
    """The benchmark's Redis, sink and destinations, with ``svcgw serve`` and workers run from ``tree``."""

    tree: Path = REPO

    def start_tree(self) -> None:
        self.start(serve=False)
        port = str(free_port())
        self.server = TreeRole(["serve"], dict(self.env, SVCGW_PORT=port), self.workdir / "serve.log", self.tree)
        self.server.start()
        self.base = f"http://127.0.0.1:{port}"
        wait_until(lambda: ready(self.base), 30, f"svcgw serve of {self.tree}")
        wait_for_listeners(self.server, int(port), int(self.env.get("SVCGW_HTTP_WORKERS", "1")))

    def start_workers(self) -> None:
        self.workers = [
            TreeRole(["worker"], self.env, self.workdir / f"worker-{n}.log", self.tree).start()
            for n in range(self.plan.workers)
        ]


def ready(base: str) -> bool:
    """Whether the server at ``base`` answers ``/readyz`` with 200."""
    import httpx

    try:
        return httpx.get(base + "/readyz", timeout=1, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def measure(tree: Tree, workdir: Path, seconds: float, short: bool, instances: int = 100) -> dict[str, Any]:
    """One ingest and one drain of ``tree`` on a Redis of its own, the posts spread over ``instances``."""
    bench = TreeBench(Plan(short=short, fast_ports=instances), workdir, "always", tree=tree.path)
    bench.start_tree()
    try:
        assert bench.server is not None and bench.server.proc is not None
        serve_pids = _tree(bench.server.proc.pid)
        used0, commands0 = bench.redis.used_memory(), bench.redis.commands()
        redis0, serve0 = bench.redis.cpu_seconds(), cpu_seconds(serve_pids)
        posted = saturate_with_wrk(bench, seconds, 64, prefix=f"{tree.name}-")
        queue = keys.rq.queue(bench.settings.queue_name)
        stored = settled(lambda: int(bench.redis.client.llen(queue)))
        used1, commands1 = bench.redis.used_memory(), bench.redis.commands()
        redis1, serve1 = bench.redis.cpu_seconds(), cpu_seconds(serve_pids)
        bench.sink.reset()
        bench.start_workers()
        wait_until(lambda: bench.redis.client.scard("rq:workers") == len(bench.workers), 30, "the workers registered")
        worker_pids = [pid for w in bench.workers if w.proc is not None for pid in _tree(w.proc.pid)]
        worker0, commands2, redis2 = cpu_seconds(worker_pids), bench.redis.commands(), bench.redis.cpu_seconds()
        arrivals = bench.drain(stored, timeout=180)
        inflight = keys.inflight(bench.settings.queue_name)
        # The last finish scripts run after the sink answered: wait for them before reading Redis.
        wait_until(lambda: bench.redis.client.llen(queue) == 0 and bench.redis.client.zcard(inflight) == 0, 30,
                   "the queue drained")  # fmt: skip
        worker1, commands3, redis3 = cpu_seconds(worker_pids), bench.redis.commands(), bench.redis.cpu_seconds()
        used3 = bench.redis.used_memory()
    finally:
        bench.stop()
    delivered = len({event_id for event_id, _ in arrivals})
    per_post, per_delivery = max(stored, 1), max(delivered, 1)
    return {
        "posted_ok": posted["ok"], "stored": stored, "delivered": delivered, "undelivered": stored - delivered,
        "ingest_per_s": posted["ok_per_s"],
        "serve_cpu_us_per_post": round((serve1 - serve0) / per_post * 1e6),
        "redis_cpu_us_per_post": round((redis1 - redis0) / per_post * 1e6),
        "commands_per_post": round((commands1 - commands0) / per_post, 2),
        "bytes_per_post_logged": round((used1 - used0) / per_post),
        "deliveries_per_s": round(rate_of([t for _, t in arrivals]), 1),
        "worker_cpu_us_per_delivery": round((worker1 - worker0) / per_delivery * 1e6),
        "redis_cpu_us_per_delivery": round((redis3 - redis2) / per_delivery * 1e6),
        "commands_per_delivery": round((commands3 - commands2) / per_delivery, 2),
        "bytes_per_event_after_delivery": round((used3 - used0) / per_delivery),
    }  # fmt: skip


def settled(read: Any, quiet: float = 0.5, timeout: float = 30.0) -> int:
    """``read()`` once it stopped changing for ``quiet`` seconds: posts cut off by wrk's end still land."""
    deadline = time.monotonic() + timeout
    last, since = read(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = read()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return int(last)


def summarise(rounds: list[dict[str, dict[str, Any]]], names: Sequence[str] = FIGURES) -> dict[str, Any]:
    """Medians per tree, the worst undelivered count, ``after / before`` of every figure's medians, and the
    median of every figure's ``after / before`` round by round (``paired``; None where a round has no ratio).

    ``names``: the figures of each measurement (another bench's, :mod:`tests.bench.engine`)."""
    trees = list(rounds[0])
    figures: dict[str, Any] = {"rounds": rounds}
    for tree in trees:
        runs = [r[tree] for r in rounds]
        figures[tree] = {f: statistics.median(run[f] for run in runs) for f in names}
        figures[tree]["undelivered"] = max(run["undelivered"] for run in runs)
    if "before" in trees:
        figures["ratios"] = {f: verdict.ratio(figures["after"][f], figures["before"][f]) for f in names}
        figures["paired"] = {f: _paired(rounds, f) for f in names}
    return figures


def _paired(rounds: list[dict[str, dict[str, Any]]], figure: str) -> float | None:
    each = [verdict.ratio(r["after"][figure], r["before"][figure]) for r in rounds]
    # A round without a ratio (a figure of zero) leaves the median unjudged rather than skewed.
    if any(value is None for value in each):
        return None
    return round(statistics.median(value for value in each if value is not None), 2)


def table(figures: dict[str, Any], names: Sequence[str] = FIGURES) -> list[str]:
    trees = [n for n in ("before", "after") if n in figures]
    head = f"{'figure (median)':<34}" + "".join(f"{n:>12}" for n in trees)
    lines = [head + (f"{'after/before':>14}{'paired':>8}" if "ratios" in figures else "")]
    for f in names:
        row = f"{f:<34}" + "".join(f"{figures[n][f]:>12g}" for n in trees)
        if "ratios" in figures:
            row += f"{figures['ratios'][f]!s:>14}{figures['paired'][f]!s:>8}"
        lines.append(row)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="REF", help="also measure this commit (git archive), alternating")
    parser.add_argument(
        "--instances", type=int, default=Plan.fast_ports, help="instances the posts go to, round robin (100)"
    )
    args, rounds, seconds = parse_rounds(parser, argv, rounds=3)
    if args.instances < 1:
        parser.error("--instances must be at least 1")
    if without_wrk():
        return 2
    started = time.monotonic()
    measured = alternating(
        "pipeline", args.before, rounds, lambda tree, path: measure(tree, path, seconds, args.short, args.instances)
    )
    figures = summarise(measured)
    figures["setup"] = {"before": args.before, "rounds": rounds, "seconds": seconds, "instances": args.instances,
                        "mode": "short" if args.short else "full",
                        "elapsed_s": round(time.monotonic() - started, 1)}  # fmt: skip
    targets = TARGETS if args.before else []
    return verdict.report(figures, targets, "\n".join(table(figures)), short=args.short, out=None)


def alternating(
    bench: str, before: str | None, rounds: int, measure: Callable[[Tree, Path], dict[str, Any]]
) -> list[dict[str, dict[str, Any]]]:
    """``measure`` of this tree and, with ``before``, of that commit's, ``rounds`` times, by round and tree.

    The order is swapped every round (``before`` then ``after``, then ``after`` then ``before``), so
    that neither tree always runs on the machine the other has just warmed; each measurement gets
    a fresh folder of its own.
    """
    measured: list[dict[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix=f"svcgw-bench-{bench}-") as tmp:
        workdir = Path(tmp)
        trees = [Tree("after", REPO)]
        if before:
            trees.insert(0, before_tree(workdir, before))
        for n in range(rounds):
            this: dict[str, dict[str, Any]] = {}
            for tree in trees if n % 2 == 0 else trees[::-1]:
                print(f"... round {n + 1} of {rounds}: {tree.name}", file=sys.stderr, flush=True)
                path = workdir / f"{tree.name}-{n}"
                path.mkdir()
                this[tree.name] = measure(tree, path)
            measured.append(this)
    return measured


def add_round_arguments(parser: argparse.ArgumentParser, *, rounds: int) -> None:
    """``--rounds``, ``--seconds`` (wrk's posting time per measurement) and ``--short``."""
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--seconds", type=float, default=8.0, help="wrk's posting time per measurement")
    parser.add_argument("--short", action="store_true", help="one round of one second (a smoke test)")


def parse_rounds(
    parser: argparse.ArgumentParser, argv: list[str] | None, *, rounds: int
) -> tuple[argparse.Namespace, int, float]:
    """``argv`` parsed with :func:`add_round_arguments`' options too, and the rounds and wrk's seconds they give."""
    add_round_arguments(parser, rounds=rounds)
    args = parser.parse_args(argv)
    return (args, 1, 1.0) if args.short else (args, args.rounds, args.seconds)


def without_wrk() -> bool:
    """Whether wrk, which these benches post with, is missing (and then why, on stderr)."""
    if wrk_path() is not None:
        return False
    print("wrk is not installed (apt-get install wrk)", file=sys.stderr)
    return True


if __name__ == "__main__":
    sys.exit(main())
