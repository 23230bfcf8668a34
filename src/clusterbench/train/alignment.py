"""Loss alignment: a run's per-step loss against a reference curve, and the verdict.

Figures exactly as ../../shared/REFERENCE.md §5, with dᵢ = lᵢ − rᵢ:

- variance against the reference = mean of dᵢ² over steps 1..N (N = steps compared, 100
  by default);
- mean relative error (FlagPerf) = mean of |dᵢ| / rᵢ over steps 21..N (steps 1..N when
  N <= 20, so a short test run is still judged; the window used is recorded);
- max abs deviation = max |dᵢ|; first-step error = |d₁| / r₁ (MindSpore's guide: < 0.5 %).

Limits. A reference made with `--repeats K` carries a noise band, Megatron's rule:
band = max(1.5 × the largest relative deviation between the repeated runs, 0.001), where the
largest relative deviation is max over repeats k > 1 and steps i of |l_k,i − l_1,i| / l_1,i
(run 1 is the reference curve). Repeats use the same seed, so the band measures the run-to-run
nondeterminism of the reference hardware; on a CPU the repeats are bitwise equal and the band
is the 0.001 floor. From the band:

- variance limit = mean over steps of (band × rᵢ)², the variance of a curve that strays from
  the reference by exactly the band at every step;
- MRE limit = max(0.02, band): REFERENCE.md's 0.02, widened only by a noisier reference.

PASS when MRE < MRE limit and variance <= variance limit and every loss is finite.
`--mre-limit` and `--variance-limit` replace the derived limits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

MRE_LIMIT = 0.02
BAND_FLOOR = 0.001
BAND_FACTOR = 1.5
MRE_FIRST_STEP = 21  # 1-based, REFERENCE.md §5
MRE_LAST_STEP = 100


def noise_band(repeats: list[list[float]]) -> tuple[float, float]:
    """(largest relative deviation of the repeats from the first, band) per Megatron's rule."""
    base = repeats[0]
    dev = max((abs(run[i] - base[i]) / abs(base[i]) for run in repeats[1:] for i in range(len(base))),
              default=0.0)
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


def compare(losses: list[float], reference: list[float], limits: Limits, expected_steps: int,
            reference_name: str) -> dict[str, Any]:
    """The alignment section of run.json: figures, limits, verdict and the reasons for it."""
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
    if mre is not None and not mre < limits.mre:
        reasons.append(f"MRE {mre:.4g} over steps {lo}..{hi} is not below the limit {limits.mre:.4g}")
    if variance is not None and not variance <= limits.variance:
        reasons.append(f"variance {variance:.4g} exceeds the limit {limits.variance:.4g}")
    return {
        "reference": reference_name,
        "reference_losses": list(reference),
        "steps_compared": n,
        "variance": variance,
        "mre": mre,
        "mre_window": [lo, hi],
        "max_abs_dev": max_abs,
        "first_step_error": first,
        "variance_limit": limits.variance,
        "mre_limit": limits.mre,
        "verdict": "FAIL" if reasons else "PASS",
        "reasons": reasons,
    }
