"""``python -m tests.bench.latency [--before REF] [--rounds N] [--rates LIGHT,LOADED] [--short]``: ingest-to-sink
latency of two trees at the same rates, side by side.

The full benchmark judges the latency at half the sustained rate against the latency at a tenth
of it (``latency_p50_vs_light``), so a tree that sustains more is judged at a higher load. This
bench holds the rates fixed, so that two trees meet the same load: each round starts, for every
tree in turn (the order swapped every round), a Redis of its own (append-only file, ``appendfsync
always``), the tree's ``svcgw serve`` and two workers, warms them up for 2 s, then posts open
loop at the light rate for 5 s and at the loaded rate for 4 s (``scenarios.latency``: a post's
latency counts from the moment it was due to its arrival at the sink).

Figures per tree, medians over the rounds: p50 and p99 at each rate, their ratios loaded / light,
and the posts' own p99 (the receiver's answer). The last line is one JSON object. No target is
judged (the full benchmark judges the ratio); it exits 1 when a post was not delivered.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from . import verdict
from .gateway import Tree
from .pipeline import TreeBench, alternating
from .scenarios import Plan, latency
from .services import wait_until

FIGURES = (
    "light_p50_ms", "light_p99_ms", "loaded_p50_ms", "loaded_p99_ms", "loaded_ingest_p99_ms", "p50_ratio", "p99_ratio",
)  # fmt: skip


def measure(tree: Tree, workdir: Path, light: float, loaded: float, short: bool) -> dict[str, Any]:
    """Latency at ``light`` then at ``loaded`` posts/s, with ``tree``'s server and workers on a Redis of its own."""
    bench = TreeBench(Plan(short=short), workdir, "always", tree=tree.path)
    bench.start_tree()
    try:
        bench.start_workers()
        wait_until(lambda: bench.redis.client.scard("rq:workers") == len(bench.workers), 30, "the workers registered")
        latency(bench, light, 1 if short else 2, "warm-")
        calm = latency(bench, light, 1 if short else 5, "light-")
        busy = latency(bench, loaded, 1 if short else 4, "loaded-")
    finally:
        bench.stop()
    return {
        "light_p50_ms": calm["p50_ms"], "light_p99_ms": calm["p99_ms"],
        "loaded_p50_ms": busy["p50_ms"], "loaded_p99_ms": busy["p99_ms"], "loaded_ingest_p99_ms": busy["ingest_p99_ms"],
        "p50_ratio": verdict.ratio(busy["p50_ms"], calm["p50_ms"]),
        "p99_ratio": verdict.ratio(busy["p99_ms"], calm["p99_ms"]),
        "undelivered": calm["posted"] - calm["delivered"] + busy["posted"] - busy["delivered"],
    }  # fmt: skip


def summarise(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Medians per tree (a missing figure left out), and the most posts a round left undelivered."""
    figures: dict[str, Any] = {"rounds": rounds}
    for name in rounds[0]:
        runs = [r[name] for r in rounds]
        figures[name] = {f: _median([run[f] for run in runs]) for f in FIGURES}
        figures[name]["undelivered"] = max(run["undelivered"] for run in runs)
    return figures


def _median(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 2) if present else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.latency", description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="REF", help="also measure this commit (git archive), alternating")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rates", default="313,1565", help="the light and the loaded rate, posts/s")
    parser.add_argument("--short", action="store_true", help="one round of a second per rate (a smoke test)")
    args = parser.parse_args(argv)
    light, loaded = (float(rate) for rate in args.rates.split(","))
    rounds = 1 if args.short else args.rounds
    started = time.monotonic()
    figures = summarise(
        alternating("latency", args.before, rounds, lambda tree, path: measure(tree, path, light, loaded, args.short))
    )
    figures["setup"] = {"before": args.before, "rounds": rounds, "rates": [light, loaded],
                        "elapsed_s": round(time.monotonic() - started, 1)}  # fmt: skip
    names = [n for n in ("before", "after") if n in figures]
    print(f"{'figure (median)':<24}" + "".join(f"{n:>12}" for n in names))
    for f in FIGURES:
        print(f"{f:<24}" + "".join(f"{figures[n][f]!s:>12}" for n in names))
    whole = all(figures[n]["undelivered"] == 0 for n in names)
    print("every post delivered" if whole else "NOT every post delivered: the figures are of a partial sample")
    print(orjson.dumps(figures).decode(), flush=True)
    return 0 if whole else 1


if __name__ == "__main__":
    sys.exit(main())
