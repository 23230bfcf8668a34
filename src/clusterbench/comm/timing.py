"""Warm-up, timed iterations, the cross-rank reduction of times, and their statistics.

Each iteration is stamped with one clock read (perf_counter on CPU, a CUDA event on GPU)
between consecutive calls, so the timed loop is the bare loop plus one timestamp. Samples
are reduced across ranks element-wise after the loop (max by default: an iteration lasts
as long as its slowest rank), so every rank holds the same samples and makes the same
decision about stopping without another collective.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

RANK_TIME = ("max", "avg", "min")
MIN_ITERS = 3  # fewer cannot give a spread
MIN_AUTO_ITERS = 5
MAX_AUTO_ITERS = 100_000
MAX_BATCH = 1000
CI_REL = 0.02  # --iters auto: stop when the 95% confidence interval of the mean is within 2%


@dataclass(frozen=True)
class Stats:
    iters: int
    mean_s: float
    p50_s: float
    p99_s: float
    min_s: float
    max_s: float
    cv: float


def summarize(samples: list[float]) -> Stats:
    xs = sorted(samples)
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1) if len(xs) > 1 else 0.0
    return Stats(
        iters=len(xs),
        mean_s=mean,
        p50_s=_quantile(xs, 0.50),
        p99_s=_quantile(xs, 0.99),
        min_s=xs[0],
        max_s=xs[-1],
        cv=math.sqrt(var) / mean if mean > 0 else 0.0,
    )


def _quantile(xs: list[float], q: float) -> float:
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def converged(samples: list[float]) -> bool:
    s = summarize(samples)
    return 1.96 * s.cv / math.sqrt(s.iters) <= CI_REL


def stamp_loop(run: Callable[[], None], iters: int, device: torch.device) -> list[float]:
    """Per-iteration seconds of `iters` back-to-back calls on this rank."""
    if device.type == "cuda":
        events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
        events[0].record()
        for i in range(iters):
            run()
            events[i + 1].record()
        events[-1].synchronize()
        return [events[i].elapsed_time(events[i + 1]) / 1e3 for i in range(iters)]
    clock = time.perf_counter
    stamps = [0.0] * (iters + 1)
    stamps[0] = clock()
    for i in range(iters):
        run()
        stamps[i + 1] = clock()
    return [stamps[i + 1] - stamps[i] for i in range(iters)]


@dataclass(frozen=True)
class RankReducer:
    """Combines one list of samples per rank into the list every rank agrees on."""

    how: str
    device: torch.device
    active_ranks: int  # ranks that take part (pt2pt with odd n leaves one out)
    active: bool
    group: dist.ProcessGroup | None = None  # the team measured; None: the whole job

    def __call__(self, samples: list[float]) -> list[float]:
        t = torch.tensor(samples, dtype=torch.float64, device=self.device)
        if not self.active:
            t.fill_(math.inf if self.how == "min" else 0.0)
        op = {"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "avg": dist.ReduceOp.SUM}[self.how]
        dist.all_reduce(t, op=op, group=self.group)
        if self.how == "avg":
            t /= self.active_ranks
        return t.tolist()


def time_op(
    run: Callable[[], None],
    device: torch.device,
    reduce: Callable[[list[float]], list[float]],
    iters: int | None,
    warmup: int,
    budget_s: float,
) -> Stats:
    """Warm up, then time `iters` iterations, or (iters None) until the mean is stable or the budget is spent."""
    first = reduce(stamp_loop(run, 1, device))[0]
    per_iter = max(first, 1e-7)
    extra_warmup = warmup - 1 if iters else min(warmup - 1, int(0.2 * budget_s / per_iter))
    if extra_warmup > 0:
        stamp_loop(run, extra_warmup, device)
    if iters:
        return summarize(reduce(stamp_loop(run, iters, device)))
    batch = max(1, min(MAX_BATCH, int(0.1 * budget_s / per_iter)))
    samples: list[float] = []
    while True:
        samples += reduce(stamp_loop(run, batch, device))
        if len(samples) >= MIN_AUTO_ITERS and converged(samples):
            break
        if (sum(samples) >= budget_s and len(samples) >= MIN_ITERS) or len(samples) >= MAX_AUTO_ITERS:
            break
        remaining = budget_s - sum(samples)
        batch = max(1, min(MAX_BATCH, int(remaining / (sum(samples) / len(samples)))))
    return summarize(samples)
