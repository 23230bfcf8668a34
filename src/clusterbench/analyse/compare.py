"""Two sets of metrics side by side: both values, the ratio, and a verdict against a tolerance.

A value that is NaN or infinite was not measured: it compares as missing, never as a pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clusterbench.analyse.metrics import is_per_size, kind_of
from clusterbench.results.run import Run

DEFAULT_TOLERANCE = 0.05


@dataclass(frozen=True)
class Comparison:
    metric: str
    reference: float | None
    candidate: float | None
    ratio: float | None  # candidate / reference
    better: str | None
    verdict: str  # PASS, FAIL, INFO (no direction), MISSING (in one side only)


def compare(reference: dict[str, float], candidate: dict[str, float], tolerance: float = DEFAULT_TOLERANCE,
            per_size: bool = False) -> list[Comparison]:
    """Judge every metric of either side; per-size comm metrics only when asked (they are many)."""
    names = sorted(set(reference) | set(candidate))
    return [_one(name, reference.get(name), candidate.get(name), tolerance)
            for name in names if per_size or not is_per_size(name)]


def _one(name: str, ref: float | None, cand: float | None, tolerance: float) -> Comparison:
    kind = kind_of(name)
    ref, cand = _measured(ref), _measured(cand)
    if ref is None or cand is None:
        return Comparison(name, ref, cand, None, kind.better, "MISSING")
    ratio = cand / ref if ref else None
    if kind.better is None:
        verdict = "INFO"
    elif kind.better == "higher":
        verdict = "FAIL" if cand < ref * (1 - tolerance) - kind.floor else "PASS"
    else:
        verdict = "FAIL" if cand > ref * (1 + tolerance) + kind.floor else "PASS"
    return Comparison(name, ref, cand, ratio, kind.better, verdict)


def _measured(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def worse(rows: list[Comparison]) -> list[Comparison]:
    return [row for row in rows if row.verdict == "FAIL"]


def lost(rows: list[Comparison]) -> list[Comparison]:
    """Judged metrics the candidate lacks: a stage that died must not pass."""
    return [row for row in rows if row.verdict == "MISSING" and row.candidate is None and row.better is not None]


def unfinished(runs: dict[str, Run]) -> list[str]:
    """Why each run that did not complete cannot be compared as if it had, by the name it was given."""
    return [f"run {label} is {run.status}" + (f" ({run.error})" if run.error else "")
            for label, run in runs.items() if run.status != "complete"]
