"""``python -m tests.bench.engine [--before REF] [--rounds N] [--seconds S] [--short]``: the delivery engine's
own CPU per delivery, without HTTP, of two trees side by side.

A worker's CPU per delivery is two things: the engine's own work (the claim, preparing and signing,
the slots, recording the outcome, the log line and the counters, the Redis calls) and aiohttp's
request. The pipeline bench (:mod:`tests.bench.pipeline`) measures them together, with the sink and
a second worker on the same two cores. This bench measures the first alone, the part this
project's code decides:

1. the tree's ``svcgw serve`` fills its queue for ``--seconds`` (wrk, 64 connections over 100
   receivers, as the pipeline bench), on a Redis of its own (append-only file, ``appendfsync
   always``), and stops;
2. one engine of the tree (``worker.engine.Engine``, its collector settled as ``svcgw worker``
   does, its log lines written to a file) drains the queue in a process of its own, in burst mode,
   through a sender that answers 200 at once without a request. Figure: that process's CPU per
   delivery, from the engine's start to its end (its imports and client set-up left out);
3. in the same measurement, the aiohttp loop of the full benchmark (``tests.bench.reference``, 50
   at once) against the bench's sink. Figure: its process's CPU per request. The two trees share
   this reference; beside each tree's engine it gives ``engine_vs_request``, the engine's CPU as a
   multiple of one aiohttp request's, a figure a machine's speed moves much less than either.

Figures per tree are the medians over the rounds; beside them, ``after / before`` of the medians
and the median of each round's own ``after / before`` (``paired``), as the pipeline bench. The
trees alternate, the order swapped every round. The last line is one JSON object.

With ``--before``, the engine's CPU per delivery is judged against that named commit: the median of
the rounds' own ``after / before`` (``paired``, which the machine's drift within a run moves least)
must be within ``--bound`` (1.1 by default: the rounds agree within about 10 %, so only a change
beyond that noise fails; a change meant to make the engine cheaper names its own bound, 0.8 say).
It exits 1 when that is not met, or when a stored event was not delivered; ``--short`` is not judged.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from svcgw.storage.keys import PLAIN as keys

from . import verdict
from .gateway import Tree
from .pipeline import TreeBench, alternating, parse_rounds, settled, summarise, table, without_wrk
from .scenarios import Plan, aiohttp_reference, saturate_with_wrk

FIGURES = ("stored", "engine_cpu_us_per_delivery", "request_cpu_us", "engine_vs_request")

# Run by the tree's own Python path: the engine of the tree measured, with an instant sender.
CHILD = """
import asyncio, json, sys, time

from svcgw.callbacks.outbound import Response
from svcgw.config.settings import Settings
from svcgw.logs import configure
from svcgw.vault import TokenVault
from worker.engine import Engine, loop_factory

try:
    from cli.runner import settle_collector
except ImportError:
    settle_collector = None


class Instant:
    timeout = 10.0
    sent = 0

    async def post(self, url, body, headers):
        Instant.sent += 1
        return Response(200, "")

    async def aclose(self):
        return None


async def drain(settings):
    engine = Engine(settings, None, TokenVault.from_settings(settings), client=Instant())
    cpu, started = time.process_time(), time.monotonic()
    await engine.serve(asyncio.Event(), burst=True)
    return time.process_time() - cpu, time.monotonic() - started


configure("INFO", json=True)
settings = Settings.from_env()
if settle_collector is not None:
    settle_collector()
with asyncio.Runner(loop_factory=loop_factory()) as runner:
    cpu, wall = runner.run(drain(settings))
print(json.dumps({"sent": Instant.sent, "cpu_s": cpu, "wall_s": wall}), flush=True)
"""


def measure(tree: Tree, workdir: Path, seconds: float, short: bool) -> dict[str, Any]:
    """One fill and one drain of ``tree``'s engine, and the aiohttp loop, on a Redis of its own."""
    bench = TreeBench(Plan(short=short), workdir, "always", tree=tree.path)
    bench.start_tree()
    try:
        saturate_with_wrk(bench, seconds, 64, prefix=f"{tree.name}-")
        queue = keys.rq.queue(bench.settings.queue_name)
        stored = settled(lambda: int(bench.redis.client.llen(queue)))
        assert bench.server is not None
        bench.server.stop()
        drained = drain(tree, bench.env, workdir)
        request = float(aiohttp_reference(bench)["cpu_us_per_request"])
    finally:
        bench.stop()
    engine_us = drained["cpu_s"] / max(drained["sent"], 1) * 1e6
    return {
        "stored": stored,
        "undelivered": stored - int(drained["sent"]),
        "engine_cpu_us_per_delivery": round(engine_us, 1),
        "request_cpu_us": request,
        "engine_vs_request": round(engine_us / request, 2) if request else 0.0,
    }


def drain(tree: Tree, env: dict[str, str], workdir: Path) -> dict[str, Any]:
    """The tree's engine drained the queue in a process of its own: ``{"sent", "cpu_s", "wall_s"}``."""
    with open(workdir / "engine.log", "wb") as log:
        answer = subprocess.run(
            [sys.executable, "-c", CHILD], env=dict(env, PYTHONPATH=str(tree.path)), cwd=tree.path,
            stdout=subprocess.PIPE, stderr=log, check=True, timeout=300,
        )  # fmt: skip
    return dict(json.loads(answer.stdout.decode().strip().splitlines()[-1]))


def judge(figures: dict[str, Any], bound: float) -> dict[str, Any]:
    """The engine's CPU per delivery against the named commit: ``targets`` and ``verdict``, put in ``figures``."""
    whole = all(figures[n]["undelivered"] == 0 for n in ("before", "after") if n in figures)
    target = verdict.Target(
        "engine_cpu_vs_before", "paired.engine_cpu_us_per_delivery", "<=", bound,
        "engine CPU per delivery / the named commit's, median of the rounds' own ratios",
        (verdict.none("after.undelivered"), verdict.none("before.undelivered")),
    )  # fmt: skip
    judged = verdict.judge(figures, [target]) if "before" in figures else []
    figures["targets"] = {j.name: j.as_json() for j in judged}
    figures["verdict"] = verdict.summary(judged, short=figures["setup"]["mode"] == "short")
    figures["verdict"]["whole"] = whole
    return figures


def exit_status(figures: dict[str, Any]) -> int:
    """1 when a stored event was not delivered, or a judged run missed its bound; else 0."""
    return 1 if not figures["verdict"]["whole"] else verdict.exit_status(figures["verdict"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.engine", description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="REF", help="also measure this commit (git archive), alternating")
    parser.add_argument("--bound", type=float, default=1.1,
                        help="the most the engine's CPU per delivery may be of --before's (paired median)")  # fmt: skip
    args, rounds, seconds = parse_rounds(parser, argv, rounds=3)
    if without_wrk():
        return 2
    started = time.monotonic()
    measured = alternating("engine", args.before, rounds, lambda tree, path: measure(tree, path, seconds, args.short))
    figures = summarise(measured, FIGURES)
    figures["setup"] = {"before": args.before, "rounds": rounds, "seconds": seconds,
                        "mode": "short" if args.short else "full",
                        "elapsed_s": round(time.monotonic() - started, 1)}  # fmt: skip
    print("\n".join(table(figures, FIGURES)))
    judge(figures, args.bound)
    whole = figures["verdict"]["whole"]
    print("every stored event delivered" if whole else "NOT every stored event delivered: a partial sample")
    print("\n".join(verdict.rows(figures["targets"])))
    if figures["targets"]:
        print(verdict.line(figures["verdict"]))
    print(orjson.dumps(figures).decode(), flush=True)
    return exit_status(figures)


if __name__ == "__main__":
    sys.exit(main())
