"""The benchmark's verdicts: figures in, judged targets out, nothing measured here; printed only by
:func:`report`, the ending of a benchmark that runs alone (``tests.bench.connection_floods``, ...).

A target is met only when three things hold:

* its figure is there and is a number (a missing figure, or a ratio with a
  zero or missing side, is *not met*, never "n/a");
* the figure is within its bound;
* the work the figure was measured on was done in full: every :class:`Need`
  of the target holds (every event delivered, every call answered 2xx,
  every retry attempted). A figure over part of its work says nothing about
  the rest: an empty sample's latency is no latency at all.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
}


@dataclass(frozen=True)
class Need:
    """A condition on the sample: ``figure`` ``comparison`` ``other`` (a dotted figure or a number)."""

    figure: str
    comparison: str
    other: str | float


@dataclass(frozen=True)
class Target:
    """``figure`` ``comparison`` ``bound``, judged only on a full sample (``needs``); ``says`` is its label.

    ``judged`` False: the figure is reported beside its bound but does not count toward the verdict,
    for a ratio whose reference moves with the machine more than the code does.
    """

    name: str
    figure: str
    comparison: str
    bound: float
    says: str
    needs: tuple[Need, ...] = ()
    judged: bool = True


@dataclass(frozen=True)
class Judged:
    name: str
    value: Any
    target: str
    met: bool
    says: str
    why: str  # empty when met
    judged: bool = True  # False: reported only (Target.judged)

    def as_json(self) -> dict[str, Any]:
        return {"value": self.value, "target": self.target, "met": self.met, "says": self.says, "why": self.why,
                "judged": self.judged}  # fmt: skip


def all_of(done: str, of: str) -> tuple[Need, ...]:
    """Every one of ``of`` was done (``done`` equals it), and there was some work at all."""
    return Need(of, ">", 0), Need(done, "==", of)


def none(failed: str) -> Need:
    """Nothing failed: the count ``failed`` is zero."""
    return Need(failed, "==", 0)


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b`` to two places; None (so a target on it is not met) when either side is zero or missing."""
    if not a or not b:
        return None
    return round(a / b, 2)


def lookup(figures: dict[str, Any], dotted: str) -> Any:
    value: Any = figures
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _unmet(figures: dict[str, Any], need: Need) -> str:
    """Why ``need`` does not hold, or empty when it does."""
    left = lookup(figures, need.figure)
    right = lookup(figures, need.other) if isinstance(need.other, str) else need.other
    if not _number(left) or not _number(right):
        return f"no figure for {need.figure} {need.comparison} {need.other}"
    if COMPARE[need.comparison](left, right):
        return ""
    bound = f"{need.other} ({right:g})" if isinstance(need.other, str) else f"{right:g}"
    return f"{need.figure} {left:g}, needs {need.comparison} {bound}"


def judge(figures: dict[str, Any], targets: Iterable[Target]) -> list[Judged]:
    """Each target judged on ``figures``, in the order given."""
    judged = []
    for target in targets:
        value = lookup(figures, target.figure)
        reasons = [reason for need in target.needs if (reason := _unmet(figures, need))]
        if not _number(value):
            reasons.insert(0, "no figure")
        elif not COMPARE[target.comparison](value, target.bound):
            reasons.insert(0, "out of bound")
        judged.append(
            Judged(target.name, value, f"{target.comparison} {target.bound:g}", not reasons, target.says,
                   "; ".join(reasons), target.judged)
        )  # fmt: skip
    return judged


def summary(judged: list[Judged], *, short: bool) -> dict[str, Any]:
    """The run's one verdict, on the judged targets (the reported ones are left out).

    A short run is not judged: it cannot do the work the targets name."""
    counted = [j for j in judged if j.judged]
    missed = [j.name for j in counted if not j.met]
    return {"judged": not short, "met": not missed, "targets": len(counted), "not_met": missed}


def rows(targets: dict[str, dict[str, Any]]) -> list[str]:
    """One line per target (``as_json`` by name): its value, bound, and why it is not met; a reported one says so."""
    lines = []
    for name, judged in targets.items():
        mark = "met" if judged["met"] else f"NOT met ({judged['why']})"
        if not judged.get("judged", True):
            mark = f"reported, not judged: {'within' if judged['met'] else 'outside'} {judged['target']}"
        lines.append(f"{name:<28} {judged['value']!s:>10}  target {judged['target']:<8} {mark}")
    return lines


def line(verdict: dict[str, Any]) -> str:
    """The verdict as one line of text."""
    missed = verdict["not_met"]
    if not verdict["judged"]:
        return (f"verdict: not judged (short run; {verdict['targets'] - len(missed)} of {verdict['targets']} "
                "targets would be met)")  # fmt: skip
    if not missed:
        return f"verdict: met, all {verdict['targets']} targets"
    return f"verdict: NOT met, {len(missed)} of {verdict['targets']} targets: {', '.join(missed)}"


def exit_status(verdict: dict[str, Any]) -> int:
    """1 when a judged run missed a target, else 0."""
    return 1 if verdict["judged"] and not verdict["met"] else 0


def report(
    figures: dict[str, Any],
    targets: Iterable[Target],
    table: str,
    *,
    short: bool,
    out: Path | None,
    under: str | None = None,
) -> int:
    """A benchmark's ending: ``figures`` judged on ``targets`` (kept under ``targets`` and ``verdict``), then
    ``table``, a row per target, the verdict line and, last, the JSON line (also written to ``out``); the
    exit status.

    ``under``: the figures are one scenario's, named so as the whole benchmark names them
    (``tests.bench.gateway``): judged and printed as ``{under: figures}``, their targets and verdict kept
    inside them, so the same targets read the same dotted figures alone or in the whole run."""
    whole = figures if under is None else {under: figures}
    judged = judge(whole, targets)
    figures["targets"] = {j.name: j.as_json() for j in judged}
    figures["verdict"] = summary(judged, short=short)
    print(table)
    print("\n".join(rows(figures["targets"])))
    print(line(figures["verdict"]))
    text = orjson.dumps(whole).decode()
    if out is not None:
        out.write_text(text + "\n")
    print(text, flush=True)
    return exit_status(figures["verdict"])
