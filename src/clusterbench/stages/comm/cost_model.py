"""The alpha-beta model fitted to a run: t(S) = alpha + beta * S per op and link class (docs/methodology.md §14).

Times span six decades from 8 B to 1 GiB, so an ordinary least-squares fit would be decided by the
largest sizes alone. The fit minimises relative error instead (weights 1/t^2), and is robust: each
pass down-weights points whose relative residual is far off the others (Huber weights on a MAD
scale), so a size hit by a scheduler stall does not bend the line.

A fit on relative error does not depend on the units, so it runs on sizes and times scaled to at
most 1, with weights scaled to at most 1: times of 1e-300 or 1e300 µs neither overflow nor divide
by zero. A model whose figures still do not fit in a float (times spanning hundreds of decades)
is refused in one line rather than stored.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from clusterbench.collectives import COLLECTIVES
from clusterbench.errors import UsageError
from clusterbench.results.run import Run
from clusterbench.stages.comm.records import COMM, CommRow, CostModel, LinkName, LinkParams, OpFit, Validation
from clusterbench.units import human_bytes

PREFERRED = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")  # what the links are derived from
HOLDOUT_BAR = 0.15  # a held-out median error above this: the sizes do not follow one line
MAX_ERROR = 1e6  # a held-out error is kept up to this (100,000,000 %)
_HUBER = 1.345  # the usual tuning constant: 95 % efficiency on clean normal errors
_MAD = 1.4826  # MAD to a normal sigma
_TINY = sys.float_info.min  # the least a predicted time is taken to be: relative errors divide by it


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
    if not all(math.isfinite(v) and v > 0 for v in (*sizes, *times)):
        raise UsageError("an alpha-beta fit needs sizes and times that are positive finite numbers")
    size_unit, time_unit = max(sizes), max(times)
    x = [s / size_unit for s in sizes]
    y = [t / time_unit for t in times]
    if min(y) == 0:  # the fastest is more than 300 decades below the slowest
        raise UsageError(f"an alpha-beta fit of times from {min(times):.3g} to {time_unit:.3g} µs: no measurement "
                         "spans that many decades")
    weights = _relative([1.0] * len(y), y)
    alpha = beta = 0.0
    for _ in range(passes):
        alpha, beta = _weighted_line(x, y, weights)
        predicted = [max(alpha + beta * v, _TINY) for v in x]
        residuals = [(t - p) / p for t, p in zip(y, predicted)]
        scale = _MAD * statistics.median(abs(r) for r in residuals) or 1e-12
        weights = _relative([min(1.0, _HUBER * scale / abs(r)) if r else 1.0 for r in residuals], predicted)
    return Line(alpha * time_unit, beta * (time_unit / size_unit), _log_r2(x, y, alpha, beta))


def _relative(factors: Sequence[float], predicted: Sequence[float]) -> list[float]:
    """factor / p^2, scaled so that the heaviest is 1 (the fit is the same): 1 / p^2 itself overflows
    for p near 1e-160."""
    low = min(predicted)
    return [f * (low / p) * (low / p) for f, p in zip(factors, predicted)]


def _weighted_line(x: Sequence[float], y: Sequence[float], w: Sequence[float]) -> tuple[float, float]:
    sw = sum(w)
    mx = sum(wi * xi for wi, xi in zip(w, x)) / sw
    my = sum(wi * yi for wi, yi in zip(w, y)) / sw
    sxx = sum(wi * (xi - mx) ** 2 for wi, xi in zip(w, x))
    if sxx <= 0:  # all the weight on one size (the others a million times slower): no slope to see
        return my, 0.0
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
    left = sum((v - math.log(max(alpha + beta * s, _TINY))) ** 2 for v, s in zip(logs, sizes))
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


STATS = ("p50", "mean", "min")


def row_time(row: CommRow, stat: str) -> float:
    return {"p50": row.p50_us, "min": row.min_us}.get(stat, row.duration_us)


def _timed(row: CommRow) -> bool:
    """Whether every time of the row is a measurement: a row not timed (0) or timed wrong (NaN) is no point."""
    return all(math.isfinite(t) and t > 0 for t in (row_time(row, stat) for stat in STATS))


def groups(run: Run, size_range: tuple[int, int] | None = None) -> dict[tuple[str, LinkName, int], list[CommRow]]:
    """The run's comm rows (within size_range) by (op, link class, ranks); teams of one scope pool into one group.
    A row of no ranks or no nodes is refused: no sweep measures one, and the busbw factor and the shape of
    the nodes divide by them."""
    low, high = size_range or (0, math.inf)
    found: dict[tuple[str, LinkName, int], list[CommRow]] = {}
    for i, row in enumerate(COMM.of(run)):
        if row.world_size < 1 or row.nodes < 1:
            raise UsageError(f"comm row {i} ({row.op}, {row.size_bytes} B) has {row.world_size} ranks on "
                             f"{row.nodes} nodes: not a measurement to fit")
        link = link_of(row)
        if (link is not None and row.op in COLLECTIVES and row.wrong == 0 and _timed(row)
                and low <= row.size_bytes <= high):
            found.setdefault((row.op, link, row.world_size), []).append(row)
    return found


def fit_rows(op: str, link: LinkName, n: int, rows: list[CommRow], stat: str) -> OpFit:
    line = fit_line([r.size_bytes for r in rows], [row_time(r, stat) for r in rows])
    # The bytes each rank puts on its link are the op's busbw factor times S: busbw is a link rate.
    factor = COLLECTIVES[op].busbw_factor(n)
    # 1 byte/µs = 1e-3 GB/s
    gbs = factor / line.beta * 1e-3 if line.beta > 0 and factor > 0 else None
    fit = OpFit(op, link, n, line.alpha, line.beta, gbs, line.r2, len(rows))
    if not all(math.isfinite(v) for v in (fit.alpha_us, fit.beta_us_per_byte, gbs or 0.0)):
        times = [row_time(r, stat) for r in rows]
        raise UsageError(f"the fit of {op} ({link}, {n} ranks) does not fit in a number: its {stat} times run from "
                         f"{min(times):.3g} to {max(times):.3g} µs, which no measurement does")
    return fit


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
    errors = [_error(line, r.size_bytes, row_time(r, stat)) for r in rows if r.size_bytes in test]
    return Validation(op, link, statistics.median(errors), max(errors), len(errors))


def _error(line: Line, size: float, time: float) -> float:
    """|line(size) - time| / time, each term divided first (a time of 1e300 µs must not overflow), at most
    MAX_ERROR: beyond it the line does not predict the size at all, by how much says nothing more."""
    error = abs(line.alpha / time + line.beta * (size / time) - 1)
    return min(error, MAX_ERROR) if math.isfinite(error) else MAX_ERROR


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
