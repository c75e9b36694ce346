"""``python -m tests.bench.plot RESULT.json OUT.png``: the figure of ``docs/performance.md``.

RESULT.json is what ``python -m tests.bench --out RESULT.json`` wrote.
Needs matplotlib (``pip install '.[bench]'``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson


def _ms(seconds: float | None) -> float | None:
    """Seconds to milliseconds; None (nothing attempted) stays None."""
    return None if seconds is None else seconds * 1000


def plot(figures: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reference = figures["reference"]
    rates = [
        ("svcgw\nend to end", figures["e2e"]["deliveries_per_s"], "#2b6cb0"),
        ("svcgw\nposting and\ndelivering", figures["sustained"]["delivered_per_s"], "#2b6cb0"),
        ("svcgw\n200 ms\nendpoints", figures["slow"]["deliveries_per_s"], "#2b6cb0"),
        ("svcgw\n10% hanging\n(healthy)", figures["isolation"]["healthy_per_s"], "#2b6cb0"),
        ("raw aiohttp\nloop, c=50", reference["aiohttp_loop_c50"]["per_s"], "#718096"),
        ("stock RQ\nSimpleWorker\nx2", reference["rq_simpleworker_x2"]["per_s"], "#c05621"),
        ("stock RQ\nforking\nworker", reference["rq_forking_worker"]["per_s"], "#c05621"),
    ]
    ingest, lat, light, retry = figures["ingest"], figures["latency"], figures["latency_light"], figures["retry"]
    latencies = [
        (f"receiver at\na fifth of\nsaturation\n({ingest['fixed_rate']:.0f}/s)", ingest["fixed_p50_ms"],
         ingest["fixed_p99_ms"]),
        (f"receiver at\nsaturation\n({ingest['saturation_per_s']:.0f}/s)", ingest["saturation_p50_ms"],
         ingest["saturation_p99_ms"]),
        (f"ingest to sink\nat {light['rate']:.0f}/s", light["p50_ms"], light["p99_ms"]),
        (f"ingest to sink\nat {lat['rate']:.0f}/s", lat["p50_ms"], lat["p99_ms"]),
        (f"retry start,\n{retry['due_at_once']} due\nat once", _ms(retry["lateness_p50_s"]),
         _ms(retry["lateness_p99_s"])),
    ]  # fmt: skip

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2), gridspec_kw={"width_ratios": [1.5, 1]})
    names = [r[0] for r in rates]
    values = [r[1] for r in rates]
    bars = left.bar(names, values, color=[r[2] for r in rates])
    left.set_yscale("log")
    left.set_ylabel("deliveries per second (log scale)")
    left.set_title("Delivery throughput, same machine, same run")
    # End to end's target is a share of the raw loop of the same run (its bound as the run judged it).
    share = float(figures["targets"]["e2e_vs_aiohttp"]["target"].split()[-1])
    e2e_target = share * reference["aiohttp_loop_c50"]["per_s"]
    left.axhline(e2e_target, color="#38a169", linestyle="--", linewidth=1)
    left.text(-0.4, e2e_target * 1.1, f"end to end's target: {share:g} of the aiohttp loop",
              color="#38a169", ha="left", va="bottom", fontsize=8)  # fmt: skip
    for bar, value in zip(bars, values, strict=True):
        left.text(bar.get_x() + bar.get_width() / 2, value * 1.08, f"{value:,.0f}", ha="center", fontsize=8)
    left.tick_params(axis="x", labelsize=8)

    positions = range(len(latencies))
    width = 0.38
    p50 = [x[1] or 0 for x in latencies]
    p99 = [x[2] or 0 for x in latencies]
    right.bar([p - width / 2 for p in positions], p50, width, label="p50", color="#4299e1")
    right.bar([p + width / 2 for p in positions], p99, width, label="p99", color="#2c5282")
    right.set_xticks(list(positions), [x[0] for x in latencies], fontsize=8)
    right.set_yscale("log")
    right.set_ylabel("milliseconds (log scale)")
    right.set_title("Latency")
    right.legend(fontsize=8)
    for p, (a, b) in zip(positions, zip(p50, p99, strict=True), strict=True):
        right.text(p - width / 2, max(a, 0.01) * 1.1, f"{a:g}", ha="center", fontsize=7)
        right.text(p + width / 2, max(b, 0.01) * 1.1, f"{b:g}", ha="center", fontsize=7)

    setup = figures["setup"]
    fig.suptitle(
        f"svcgw benchmark: {setup['machine']['cores']} cores (shared), {setup['worker_processes']} worker processes, "
        f"{setup['http_workers']} HTTP processes, Redis {setup['machine']['redis']} AOF appendfsync "
        f"{setup['appendfsync']}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> int:
    figures = orjson.loads(Path(sys.argv[1]).read_bytes())
    plot(figures, Path(sys.argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
