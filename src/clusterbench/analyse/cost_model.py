"""The alpha-beta model fitted to a run: t(S) = alpha + beta * S per op and link class (docs/methodology.md §14).

Times span six decades from 8 B to 1 GiB, so an ordinary least-squares fit would be decided by the
largest sizes alone. The fit minimises relative error instead (weights 1/t^2), and is robust: each
pass down-weights points whose relative residual is far off the others (Huber weights on a MAD
scale), so a size hit by a scheduler stall does not bend the line.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from clusterbench.collectives import COLLECTIVES
from clusterbench.errors import UsageError
from clusterbench.results.cost_model import CostModel, LinkName, LinkParams, OpFit, Validation
from clusterbench.results.schema import CommRow, Run
from clusterbench.units import human_bytes

PREFERRED = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")  # what the links are derived from
HOLDOUT_BAR = 0.15  # a held-out median error above this: the sizes do not follow one line
_HUBER = 1.345  # the usual tuning constant: 95 % efficiency on clean normal errors
_MAD = 1.4826  # MAD to a normal sigma


@dataclass(frozen=True)
class Line:
    alpha: float  # µs
    beta: float  # µs per byte
    r2: float

    def __call__(self, size: float) -> float:
        return self.alpha + self.beta * size


def fit_line(sizes: Sequence[float], times: Sequence[float], passes: int = 30) -> Line:
    """A robust fit of times (µs) against sizes (bytes) on relative error; alpha and beta kept >= 0."""
    if len(sizes) < 2 or len(set(sizes)) < 2:
        raise UsageError("an alpha-beta fit needs at least two message sizes")
    weights = [1 / t**2 for t in times]
    alpha = beta = 0.0
    for _ in range(passes):
        alpha, beta = _weighted_line(sizes, times, weights)
        predicted = [max(alpha + beta * s, 1e-12) for s in sizes]
        residuals = [(t - p) / p for t, p in zip(times, predicted)]
        scale = _MAD * statistics.median(abs(r) for r in residuals) or 1e-12
        weights = [min(1.0, _HUBER * scale / abs(r)) / p**2 if r else 1 / p**2
                   for r, p in zip(residuals, predicted)]
    return Line(alpha, beta, _log_r2(sizes, times, alpha, beta))


def _weighted_line(x: Sequence[float], y: Sequence[float], w: Sequence[float]) -> tuple[float, float]:
    sw = sum(w)
    mx = sum(wi * xi for wi, xi in zip(w, x)) / sw
    my = sum(wi * yi for wi, yi in zip(w, y)) / sw
    sxx = sum(wi * (xi - mx) ** 2 for wi, xi in zip(w, x))
    beta = sum(wi * (xi - mx) * (yi - my) for wi, xi, yi in zip(w, x, y)) / sxx
    alpha = my - beta * mx
    # A latency or an inverse bandwidth below zero has no meaning: pin it and refit the other.
    if alpha < 0:
        return 0.0, max(sum(wi * xi * yi for wi, xi, yi in zip(w, x, y)) / sum(wi * xi * xi for wi, xi in zip(w, x)),
                        0.0)
    if beta < 0:
        return my, 0.0
    return alpha, beta


def _log_r2(sizes: Sequence[float], times: Sequence[float], alpha: float, beta: float) -> float:
    logs = [math.log(t) for t in times]
    mean = statistics.fmean(logs)
    total = sum((v - mean) ** 2 for v in logs)
    left = sum((v - math.log(max(alpha + beta * s, 1e-12))) ** 2 for v, s in zip(logs, sizes))
    return 1 - left / total if total > 0 else 1.0


def link_of(row: CommRow) -> LinkName | None:
    """intra: the row's ranks share one node; inter: they span several. None: not a plain sweep row."""
    if getattr(row, "algo", "native") not in ("native", None):  # hand-built algorithms are not the link
        return None
    if row.scope == "intra" or (row.scope == "global" and row.nodes == 1):
        return "intra"
    if row.scope == "inter" or (row.scope == "global" and row.nodes > 1):
        return "inter"
    return None


def row_time(row: CommRow, stat: str) -> float:
    return {"p50": row.p50_us, "min": row.min_us}.get(stat, row.duration_us)


def groups(run: Run, size_range: tuple[int, int] | None = None) -> dict[tuple[str, LinkName, int], list[CommRow]]:
    """The run's comm rows (within size_range) by (op, link class, ranks); teams of one scope pool into one group."""
    low, high = size_range or (0, math.inf)
    found: dict[tuple[str, LinkName, int], list[CommRow]] = {}
    for row in run.comm:
        link = link_of(row)
        if (link is not None and row.op in COLLECTIVES and row.wrong == 0 and row_time(row, "mean") > 0
                and low <= row.size_bytes <= high):
            found.setdefault((row.op, link, row.world_size), []).append(row)
    return found


def fit_rows(op: str, link: LinkName, n: int, rows: list[CommRow], stat: str) -> OpFit:
    line = fit_line([r.size_bytes for r in rows], [row_time(r, stat) for r in rows])
    # The bytes each rank puts on its link are the op's busbw factor times S: busbw is a link rate.
    factor = COLLECTIVES[op].busbw_factor(n)
    # 1 byte/µs = 1e-3 GB/s
    gbs = factor / line.beta * 1e-3 if line.beta > 0 and factor > 0 else None
    return OpFit(op, link, n, line.alpha, line.beta, gbs, line.r2, len(rows))


def derive_links(fits: list[OpFit]) -> list[LinkParams]:
    """Per link class, the per-step alpha (over the latency steps of the op's ring, pairwise or chain
    form) and the link bandwidth, from the preferred op."""
    links = []
    for link in ("intra", "inter"):
        candidates = [f for f in fits if f.link == link and COLLECTIVES[f.op].latency_steps and f.world_size > 1]
        if not candidates:
            continue
        best = min(candidates, key=lambda f: (PREFERRED.index(f.op) if f.op in PREFERRED else len(PREFERRED),
                                              -f.world_size))
        if best.bandwidth_gb_s is None:
            continue
        steps = COLLECTIVES[best.op].latency_steps(best.world_size)
        links.append(LinkParams(link, best.alpha_us / steps, best.bandwidth_gb_s,
                                f"{best.op} on {best.world_size} ranks"))
    return links


def validate(op: str, link: LinkName, rows: list[CommRow], stat: str) -> Validation | None:
    """Fit on every other size and predict the sizes between; None when too few sizes for that."""
    sizes = sorted({r.size_bytes for r in rows})
    if len(sizes) < 4:
        return None
    train, test = set(sizes[::2]), set(sizes[1::2])
    seen = [r for r in rows if r.size_bytes in train]
    line = fit_line([r.size_bytes for r in seen], [row_time(r, stat) for r in seen])
    errors = [abs(line(r.size_bytes) - row_time(r, stat)) / row_time(r, stat) for r in rows if r.size_bytes in test]
    return Validation(op, link, statistics.median(errors), max(errors), len(errors))


def fit_run(run: Run, stat: str = "p50", size_range: tuple[int, int] | None = None) -> CostModel:
    """The model of every op and link class the run measured (within size_range, bytes, both included);
    UsageError when it has no comm rows to fit."""
    found = {key: rows for key, rows in groups(run, size_range).items() if len({r.size_bytes for r in rows}) >= 2}
    if not found:
        within = f" from {span(size_range)}" if size_range else ""
        raise UsageError(f"the run holds no comm rows with two or more sizes{within} to fit "
                         "(run clusterbench comm first)")
    model = CostModel(stat, size_range=size_range)  # type: ignore[arg-type]
    for (op, link, n), rows in sorted(found.items()):
        model.fits.append(fit_rows(op, link, n, rows, stat))
        check = validate(op, link, rows, stat)
        if check is not None:
            model.validation.append(check)
    model.links = derive_links(model.fits)
    return model


def span(size_range: tuple[int, int]) -> str:
    return f"{human_bytes(size_range[0])} to {human_bytes(size_range[1])}"


def bent(model: CostModel) -> list[str]:
    """Why a fit may not be trusted: each op whose held-out error says its times do not follow one line."""
    return [f"{v.op} ({v.link}): held-out error {v.median_error:.0%} median, above {HOLDOUT_BAR:.0%}: its times "
            "do not follow one line over these sizes (the cost per byte changes past a cache boundary on CPUs, "
            "at a protocol switch on GPUs, or the timings are noisy); fit the sizes of one regime with "
            "`clusterbench model fit --sizes LOW..HIGH`"
            for v in model.validation if v.median_error > HOLDOUT_BAR]


def fit_cost_model(run: Run) -> CostModel | None:
    """`clusterbench run`'s fit of its own sweep; None when it has nothing to fit (comm skipped)."""
    try:
        return fit_run(run)
    except UsageError:
        return None
