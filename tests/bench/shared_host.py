"""``python -m tests.bench.shared_host [--pairs N] [--scenario hang|slow] [--victim N] [--short]``: one
account's deliveries to its endpoint on a host where another account's ten endpoints hang, or answer
just under the timeout, against the same deliveries alone.

Many accounts' endpoints live on one host (a chat tool's incoming webhooks, an automation platform).
The victim account has one instance whose address is ``/hook`` on the host; the attacker account has
ten instances, each at a path of its own there (``/m0`` to ``/m9``), which never answer (``hang``) or
answer after 0.8 of the delivery timeout (``slow``). Every run of a pair is on the same Redis, sink
and host, with two ``svcgw worker`` processes started for the run:

* the control: the victim's ``--victim`` deliveries alone;
* beside: as many of the victim's, each post followed by one of the attacker's (the attacker's
  spread over its ten paths), queued together, the victim's counted.

Per pair: the victim's deliveries per second beside the attacker and alone, and their ratio (the
target: at least 0.9, the median pair); the seconds from the workers' start to the victim's last
delivery, and to its median one; the requests the attacker's paths received and the most in flight
there at once (requests within 0.95 of the time each is held of each other). The attacker's probing
is kept between runs, as in service: the first pair meets its paths fresh. Medians over the pairs;
the last line is one JSON object. On a loaded machine the figures are an indication, not a result.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.asyncio import Redis as AsyncRedis

from svcgw.registry.store import Scope, Store
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault

from . import verdict
from .scenarios import Bench, Plan, Tenant, percentile, rate_of
from .verdict import Need, Target

PATHS = 10  # the attacker's endpoints on the shared host
SCENARIOS = ("hang", "slow")
FIGURES = (
    "vs_control", "victim_per_s", "control_per_s", "victim_seconds", "victim_median_s", "victim_p95_s",
    "control_median_s", "attacker_requests", "attacker_in_flight",
)  # fmt: skip

TARGETS = [
    Target(f"shared_host_{name}_vs_control", f"after.{name}.vs_control", ">=", 0.9,
           f"one account's deliveries/s to its endpoint on a host where another account's 10 paths {why}"
           " / the same alone, median pair", (Need(f"after.{name}.undelivered", "==", 0),))
    for name, why in (("hang", "hang"), ("slow", "answer in 0.8 of the timeout"))
]  # fmt: skip


@dataclass(frozen=True)
class Run:
    per_s: float
    delivered: int
    seconds: float  # from the workers' start to the victim's last delivery
    median_s: float | None  # to its median delivery
    p95_s: float | None  # to its 95th percentile delivery
    attacker_requests: int
    attacker_in_flight: int


def _most_within(times: list[float], window: float) -> int:
    ordered = sorted(times)
    most, first = 0, 0
    for last, at in enumerate(ordered):
        while at - ordered[first] >= window:
            first += 1
        most = max(most, last - first + 1)
    return most


def provision(bench: Bench, port: int, paths: list[str]) -> list[Tenant]:
    """One account with an instance at each of ``paths`` on the sink's ``port``."""

    async def run() -> list[Tenant]:
        client = AsyncRedis.from_url(bench.redis.url, decode_responses=True)
        store = Store(client, TokenVault.from_settings(bench.settings), keys)
        account = await store.create_account("bench", devices=len(paths) + 1)
        tenants = []
        for path in paths:
            appid = "we_" + os.urandom(8).hex()[:15]
            token = await store.register_instance(appid, account.id)
            await store.set_callback(Scope(appid=appid), f"http://127.0.0.1:{port}{path}")
            tenants.append(Tenant(appid, token, port))
        await client.aclose()
        return tenants

    return asyncio.run(run())


def _run(bench: Bench, tenants: list[Tenant], count: int, prefix: str, victim: str, held: float) -> Run:
    """``count`` posts round robin over ``tenants``; the victim's (its appid ``victim``) are waited for."""
    bench.sink.reset()
    bench.fill(tenants, count, prefix)
    mine = {f"{prefix}{n}" for n in range(count) if tenants[n % len(tenants)].appid == victim}
    with bench.redis.no_aof_rewrite():
        started = time.time()
        bench.start_workers()
        deadline, seen = time.monotonic() + 120, 0
        arrivals: list[tuple[str, float]] = []
        while time.monotonic() < deadline and seen < len(mine):
            time.sleep(0.05)
            arrivals += bench.sink.arrivals()
            seen = len({i for i, _ in arrivals if i in mine})
        attacker_requests = bench.sink.count("shared-m")
        arrivals += bench.sink.arrivals()
        bench.stop_workers()
    bench.clear_queue()
    first: dict[str, float] = {}
    for i, t in arrivals:
        if i in mine and i not in first:
            first[i] = t
    times = sorted(first.values())
    attacks = [t for i, t in arrivals if i not in mine]
    since = [t - started for t in times]
    p95 = percentile(since, 95)
    return Run(
        round(rate_of(times), 1), len(times), round(since[-1], 2) if since else 0.0,
        round(statistics.median(since), 3) if since else None, round(p95, 3) if p95 is not None else None,
        attacker_requests, _most_within(attacks, held * 0.95),
    )  # fmt: skip


def scenario(bench: Bench, name: str, pairs: int, count: int) -> dict[str, Any]:
    """``pairs`` pairs of the control and the victim beside the attacker's ``name`` paths (hang or slow)."""
    timeout = bench.plan.delivery_timeout
    delay = 0.0 if name == "hang" else 0.8 * timeout
    (port,) = bench.sink.listen("shared", 1, delay)
    (victim,) = provision(bench, port, ["/hook"])
    attacker = provision(bench, port, [f"/m{n}" for n in range(PATHS)])
    mixed = [t for k in range(PATHS) for t in (victim, attacker[k])]
    rounds: list[dict[str, Any]] = []
    for n in range(pairs):
        control = _run(bench, [victim], count, f"{name[:1]}c{n}-", victim.appid, timeout)
        beside = _run(bench, mixed, 2 * count, f"{name[:1]}b{n}-", victim.appid, delay or timeout)
        rounds.append({
            "vs_control": verdict.ratio(beside.per_s, control.per_s),
            "victim_per_s": beside.per_s, "control_per_s": control.per_s,
            "victim_seconds": beside.seconds, "victim_median_s": beside.median_s, "victim_p95_s": beside.p95_s,
            "control_median_s": control.median_s,
            "attacker_requests": beside.attacker_requests, "attacker_in_flight": beside.attacker_in_flight,
            "undelivered": (count - beside.delivered) + (count - control.delivered),
        })  # fmt: skip
    figures: dict[str, Any] = {
        f: round(statistics.median(v), 3) if (v := [r[f] for r in rounds if r[f] is not None]) else None
        for f in FIGURES
    }
    figures["vs_control_all_pairs"] = [r["vs_control"] for r in rounds]
    figures["undelivered"] = max(r["undelivered"] for r in rounds)
    figures["victim_seconds_all_pairs"] = [r["victim_seconds"] for r in rounds]
    return {**figures, "pairs": rounds}


def measure(workdir: Path, names: list[str], pairs: int, count: int, short: bool) -> dict[str, Any]:
    bench = Bench(Plan(short=short, fast_ports=1), workdir, "everysec")
    bench.start(serve=False, appendonly=False)
    try:
        return {name: scenario(bench, name, pairs, count) for name in names}
    finally:
        bench.stop()


def table(figures: dict[str, Any], names: list[str]) -> list[str]:
    lines = [f"{'figure (median pair)':<36}{'value':>12}"]
    for name in names:
        for f in FIGURES:
            lines.append(f"{name + ' ' + f:<36}{figures['after'][name][f]!s:>12}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.shared_host", description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--victim", type=int, default=3000, help="the victim's deliveries per run")
    parser.add_argument("--scenario", choices=SCENARIOS, action="append")
    parser.add_argument("--short", action="store_true", help="one pair of each, 200 of the victim's deliveries")
    args = parser.parse_args(argv)
    names = args.scenario or list(SCENARIOS)
    pairs, count = (1, 200) if args.short else (args.pairs, args.victim)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="svcgw-bench-shared-host-") as tmp:
        figures: dict[str, Any] = {"after": measure(Path(tmp), names, pairs, count, args.short)}
    figures["setup"] = {"pairs": pairs, "victim": count, "paths": PATHS,
                        "elapsed_s": round(time.monotonic() - started, 1)}  # fmt: skip
    targets = [t for t in TARGETS if t.figure.split(".")[1] in names]
    return verdict.report(figures, targets, "\n".join(table(figures, names)), short=args.short, out=None)


if __name__ == "__main__":
    sys.exit(main())
