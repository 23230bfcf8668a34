"""A series of figures against time that falls and stays down (docs/burnin.md, "What it judges"). Two shapes are
looked for, and the one that fits the series better is reported: a step (the split into two segments of at least
MIN_SIDE points each that leaves the least squared error, where the later segment's median is below (1 - tolerance)
x the earlier's, by more than the noise of the medians), and a steady decline (a Theil-Sen line whose fitted end
is below (1 - tolerance) x its fitted start, its trend significant by Mann-Kendall)."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MIN_SIDE = 3  # points on each side of a step: fewer cannot tell a step from a slow window
NOISE_SIGMAS = 3.0  # a step is real where the medians differ by more than this many standard errors
TREND_Z = 3.0  # Mann-Kendall's |z| a steady decline must reach
LINE_POINTS = 200  # the Theil-Sen line is fitted to at most this many points, evenly thinned (its cost is n²)


@dataclass(frozen=True)
class Fall:
    shape: str  # "step" or "decline"
    start_s: float  # where it began: the end of the last point before the step, or the first point's
    end_s: float  # the last point's end
    before: float  # the earlier segment's median, or the line's fitted start
    after: float  # the later segment's median, or the line's fitted end


def find(ts: Sequence[float], ys: Sequence[float], tolerance: float) -> Fall | None:
    """The drift of one series of figures against time (a step down or a steady decline), or None: flat, noisy
    within its tolerance, rising, or too short to tell (fewer than 2 x MIN_SIDE windows)."""
    if len(ys) < 2 * MIN_SIDE or len(ts) != len(ys):
        return None
    found = [d for d in (_step(ts, ys, tolerance), _decline(ts, ys, tolerance)) if d is not None]
    return min(found, key=lambda fit: fit[1])[0] if found else None


def _step(ts: Sequence[float], ys: Sequence[float], tolerance: float) -> tuple[Fall, float] | None:
    """The least-squares split into two segments, judged by their medians: (the drift, its absolute residual)."""
    n = len(ys)
    sums = list(itertools.accumulate(ys, initial=0.0))
    squares = list(itertools.accumulate((y * y for y in ys), initial=0.0))

    def sse(i: int, j: int) -> float:  # the squared error of ys[i:j] about its mean
        return squares[j] - squares[i] - (sums[j] - sums[i]) ** 2 / (j - i)

    k = min(range(MIN_SIDE, n - MIN_SIDE + 1), key=lambda k: sse(0, k) + sse(k, n))
    early, late = statistics.median(ys[:k]), statistics.median(ys[k:])
    if not early > 0 or late >= (1 - tolerance) * early:
        return None
    residuals = [abs(y - early) for y in ys[:k]] + [abs(y - late) for y in ys[k:]]
    sigma = 1.4826 * statistics.median(residuals)  # the residuals' spread, robust to a stray window
    noise = 1.2533 * sigma * math.sqrt(1 / k + 1 / (n - k))  # the standard error of a median, per segment
    if early - late <= NOISE_SIGMAS * noise:
        return None
    return Fall("step", ts[k - 1], ts[-1], early, late), sum(residuals)


def _decline(ts: Sequence[float], ys: Sequence[float], tolerance: float) -> tuple[Fall, float] | None:
    """A Theil-Sen line through the series, judged by its fitted start and end: (the drift, its absolute residual)."""
    step = max(1, math.ceil(len(ys) / LINE_POINTS))
    pts = list(zip(ts[::step], ys[::step]))
    slopes = [(y2 - y1) / (t2 - t1) for (t1, y1), (t2, y2) in itertools.combinations(pts, 2) if t2 > t1]
    if len(pts) < 2 * MIN_SIDE or not slopes:
        return None
    slope = statistics.median(slopes)
    intercept = statistics.median(y - slope * t for t, y in pts)
    start, end = intercept + slope * ts[0], intercept + slope * ts[-1]
    if not start > 0 or end >= (1 - tolerance) * start or _mann_kendall(pts) > -TREND_Z:
        return None
    residual = sum(abs(y - (intercept + slope * t)) for t, y in zip(ts, ys))
    return Fall("decline", ts[0], ts[-1], start, max(end, 0.0)), residual


def _mann_kendall(pts: Sequence[tuple[float, float]]) -> float:
    """The z of Mann-Kendall's trend test (no correction for ties): below -3, a falling trend noise hardly makes."""
    n = len(pts)
    s = sum((y2 > y1) - (y2 < y1) for (_, y1), (_, y2) in itertools.combinations(pts, 2))
    var = n * (n - 1) * (2 * n + 5) / 18
    return (s - (s > 0) + (s < 0)) / math.sqrt(var)
