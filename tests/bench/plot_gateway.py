"""``python -m tests.bench.plot_gateway RESULT.json OUT.png``: the gateway figure of ``docs/performance.md``.

RESULT.json is what ``python -m tests.bench.gateway --before REF --out RESULT.json`` (or the whole
bench, without the "before" bars) wrote. Needs matplotlib (``pip install '.[bench]'``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson

BEFORE, AFTER, DIRECT = "#c05621", "#2b6cb0", "#718096"


def plot(figures: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    up = figures["upstream"]
    rates: list[tuple[str, dict[str, float], str]] = [
        ("simulator\nstraight", up["sim_c50_per_s"], DIRECT),
    ]
    latencies: list[tuple[str, float, float, str]] = [
        ("fast upstream\nstraight", up["fast_c1_p50_ms"]["median"], up["fast_c1_p99_ms"]["median"], DIRECT),
        ("simulator\nstraight", up["sim_c1_p50_ms"]["median"], up["sim_c1_p99_ms"]["median"], DIRECT),
    ]
    for name, colour in (("before", BEFORE), ("after", AFTER)):
        g = figures.get(name)
        if g is None:
            continue
        rates += [
            (f"{name}\n1 worker", g["c50_w1_per_s"], colour),
            (f"{name}\n2 workers", g["c50_w2_per_s"], colour),
            (f"{name}\n1 worker,\nsimulator\nupstream", g["sim_c50_w1_per_s"], colour),
        ]
        latencies.append((f"gateway\n{name}", g["c1_p50_ms"]["median"], g["c1_p99_ms"]["median"], colour))

    fig, (left, right, cpu) = plt.subplots(1, 3, figsize=(17, 5.2), gridspec_kw={"width_ratios": [1.4, 1, 0.7]})
    positions = range(len(rates))
    medians = [r[1]["median"] for r in rates]
    errors = [
        [m - r[1]["min"] for m, r in zip(medians, rates, strict=True)],
        [r[1]["max"] - m for m, r in zip(medians, rates, strict=True)],
    ]
    left.bar(positions, medians, color=[r[2] for r in rates], yerr=errors, capsize=3)
    left.set_xticks(list(positions), [r[0] for r in rates], fontsize=8)
    left.set_ylabel("calls per second (median, range over the rounds)")
    left.set_title("c=50, POST /svc/api/user/getProfile (gateway upstream: the fast one unless named)")
    direct = up["sim_c50_per_s"]["median"]
    for share, label in ((0.5, "0.5x simulator"), (0.8, "0.8x simulator")):
        left.axhline(direct * share, color="#38a169", linestyle="--", linewidth=1)
        left.text(len(rates) - 0.5, direct * share * 1.02, label, color="#38a169", ha="right", fontsize=8)
    for p, value in zip(positions, medians, strict=True):
        left.text(p, value * 1.02, f"{value:,.0f}", ha="center", fontsize=8)
    left.title.set_fontsize(9)

    spots = range(len(latencies))
    width = 0.38
    right.bar([s - width / 2 for s in spots], [x[1] for x in latencies], width, label="p50",
              color=[x[3] for x in latencies], alpha=0.6)  # fmt: skip
    right.bar([s + width / 2 for s in spots], [x[2] for x in latencies], width, label="p99",
              color=[x[3] for x in latencies])  # fmt: skip
    right.set_xticks(list(spots), [x[0] for x in latencies], fontsize=8)
    right.set_yscale("log")
    right.set_ylabel("milliseconds (log scale)")
    right.set_title("c=1 latency, p50 (light) and p99", fontsize=9)
    for s, x in zip(spots, latencies, strict=True):
        right.text(s - width / 2, max(x[1], 0.001) * 1.1, f"{x[1]:g}", ha="center", fontsize=7)
        right.text(s + width / 2, max(x[2], 0.001) * 1.1, f"{x[2]:g}", ha="center", fontsize=7)

    # What a call cost each process at c=50 with one worker (the machine's load inflates every part).
    trees = [name for name in ("before", "after") if name in figures]
    bottoms = [0.0] * len(trees)
    for part, shade in (("gateway", None), ("redis", "#a0aec0"), ("upstream", "#cbd5e0"), ("load", "#e2e8f0")):
        values = [figures[name]["c50_w1_cpu_us_per_call"][part] for name in trees]
        colours = [shade or (BEFORE if name == "before" else AFTER) for name in trees]
        cpu.bar(range(len(trees)), values, bottom=bottoms, color=colours, edgecolor="white")
        for i, (value, bottom) in enumerate(zip(values, bottoms, strict=True)):
            if value >= 12:
                cpu.text(i, bottom + value / 2, f"{part} {value:.0f}", ha="center", va="center", fontsize=7)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    cpu.set_xticks(list(range(len(trees))), [f"gateway\n{name}" for name in trees], fontsize=8)
    cpu.set_ylabel("CPU µs per call (user + system, median of the rounds)")
    cpu.set_title("c=50, 1 worker, fast upstream: CPU per call", fontsize=9)

    setup = figures["setup"]
    fig.suptitle(
        f"svcgw gateway: {setup.get('cores', 2)} cores (shared), {setup['rounds']} rounds of "
        f"{setup['seconds_per_run']:g} s per figure, load by {setup['generator']}, Redis appendfsync "
        f"{setup.get('appendfsync', '?')}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> int:
    figures = orjson.loads(Path(sys.argv[1]).read_bytes())
    plot(figures.get("gateway", figures), Path(sys.argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
