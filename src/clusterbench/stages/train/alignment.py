"""Loss alignment: a run's per-step loss against a reference curve, and its verdict.

The figures, the noise band and the limits derived from it are those of docs/methodology.md
§5: variance of dᵢ = lᵢ − rᵢ over the steps, mean relative error over steps 21..100 (every
step of a curve shorter than 21), max |dᵢ| and the first-step error; a reference made with
K repeats carries Megatron's noise band, which sets the variance limit and can widen the
MRE limit. PASS when MRE < its limit, variance <= its limit and every loss is finite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clusterbench.stages.train.records import Alignment

MRE_LIMIT = 0.02
BAND_FLOOR = 0.001
BAND_FACTOR = 1.5
MRE_FIRST_STEP = 21  # 1-based
MRE_LAST_STEP = 100


def noise_band(repeats: list[list[float | None]]) -> tuple[float, float]:
    """(largest relative deviation of the repeats from the first, band) per Megatron's rule."""
    base, *others = [_floats(run) for run in repeats]
    dev = max((abs(run[i] - base[i]) / abs(base[i]) for run in others for i in range(len(base))), default=0.0)
    return dev, max(BAND_FACTOR * dev, BAND_FLOOR)


def variance_limit(reference: list[float], band: float) -> float:
    return sum((band * r) ** 2 for r in reference) / len(reference)


def mre_limit(band: float) -> float:
    return max(MRE_LIMIT, band)


def mre_window(n: int) -> tuple[int, int]:
    """1-based inclusive steps the MRE averages over, for a curve of n steps."""
    last = min(n, MRE_LAST_STEP)
    return (MRE_FIRST_STEP, last) if last >= MRE_FIRST_STEP else (1, last)


@dataclass(frozen=True)
class Limits:
    variance: float
    mre: float


def limits_for(reference: list[float], band: float, variance: float | None = None,
               mre: float | None = None) -> Limits:
    """Derived limits, each replaced by a user's value when given."""
    return Limits(variance if variance is not None else variance_limit(reference, band),
                  mre if mre is not None else mre_limit(band))


def _floats(losses: list[float | None]) -> list[float]:
    """run.json writes a loss that was not finite as null."""
    return [math.nan if x is None else x for x in losses]


def compare(curve: list[float | None], reference: list[float], limits: Limits, expected_steps: int,
            reference_name: str) -> Alignment:
    """The alignment section of run.json: figures, limits, verdict and the reasons for it."""
    losses = _floats(curve)
    n = min(len(losses), len(reference), expected_steps)
    d = [losses[i] - reference[i] for i in range(n)]
    finite = all(math.isfinite(x) for x in d)
    lo, hi = mre_window(n)
    if finite and n:
        variance = sum(x * x for x in d) / n
        mre = sum(abs(d[i - 1]) / reference[i - 1] for i in range(lo, hi + 1)) / (hi - lo + 1)
        max_abs, first = max(abs(x) for x in d), abs(d[0]) / reference[0]
    else:
        variance = mre = max_abs = first = None
    reasons = []
    if not finite:
        bad = next(i for i, x in enumerate(d) if not math.isfinite(x)) + 1
        reasons.append(f"loss is {losses[bad - 1]} at step {bad}")
    if len(losses) < expected_steps:
        reasons.append(f"the run stopped after {len(losses)} of {expected_steps} steps")
    if mre is not None and not _mre_ok(mre, limits.mre):
        reasons.append(f"MRE {mre:.4g} over steps {lo}..{hi} is not below the limit {limits.mre:.4g}")
    if variance is not None and not _variance_ok(variance, limits.variance):
        reasons.append(f"variance {variance:.4g} exceeds the limit {limits.variance:.4g}")
    return Alignment(reference=reference_name, reference_losses=list(reference), steps_compared=n,
                     variance=variance, mre=mre, mre_window=(lo, hi), max_abs_dev=max_abs, first_step_error=first,
                     variance_limit=limits.variance, mre_limit=limits.mre, verdict="FAIL" if reasons else "PASS",
                     reasons=reasons)


def _mre_ok(mre: float, limit: float) -> bool:
    return mre < limit


def _variance_ok(variance: float, limit: float) -> bool:
    return variance <= limit


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table(a: Alignment) -> str:
    """The figures against their limits, as `train` and `align` print them."""
    lo, hi = a.mre_window

    def row(name: str, value: str, limit: str, ok: bool | None) -> str:
        mark = "" if ok is None else ("ok" if ok else "FAIL")
        return f"  {name:<28} {value:>12}   {limit:<14} {mark}"

    var, mre, first = a.variance, a.mre, a.first_step_error
    lines = [
        f"# alignment vs {a.reference} ({a.steps_compared} steps)",
        row("variance vs reference", _fmt(var, ".3e"), f"<= {a.variance_limit:.3e}",
            None if var is None else _variance_ok(var, a.variance_limit)),
        row(f"MRE steps {lo}..{hi}", _fmt(mre, ".3e"), f"< {a.mre_limit:.3g}",
            None if mre is None else _mre_ok(mre, a.mre_limit)),
        row("max abs deviation", _fmt(a.max_abs_dev, ".3e"), "reported", None),
        row("first-step error", _fmt(first and 100 * first, ".4f") + " %", "guide < 0.5 %", None),
        f"  verdict: {a.verdict}" + "".join(f"\n    - {r}" for r in a.reasons),
    ]
    return "\n".join(lines)
