"""Warm-up, timed iterations, the cross-rank reduction of times, and their statistics.

Three ways to time (--timing, docs/methodology.md §1):
  stamps  each iteration stamped with one clock read (perf_counter on CPU, a CUDA event on GPU)
          between consecutive calls: one sample per iteration, so p50/p99/CV describe iterations
          (nccl-tests' -I).
  loop    one clock read (or event pair) around a batch of back-to-back calls: one sample per
          batch, the mean per call; nothing between calls (nccl-tests' default).
  graph   the batch captured once in a CUDA graph and replayed: no launch cost (nccl-tests' -G).
Samples are reduced across ranks element-wise (max by default: an iteration lasts as long as its
slowest rank), so every rank holds the same samples and makes the same decision about stopping
without another collective.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from clusterbench.errors import UsageError, one_line

MIN_ITERS = 3  # fewer cannot give a spread
MIN_AUTO_ITERS = 5
MAX_AUTO_ITERS = 100_000
MAX_BATCH = 1000
CI_REL = 0.02  # --iters auto: stop when the 95% confidence interval of the median is within 2%


@dataclass(frozen=True)
class Stats:
    iters: int
    mean_s: float
    p50_s: float
    p99_s: float
    min_s: float
    max_s: float
    cv: float


def summarize(samples: list[float], calls: int | None = None) -> Stats:
    xs = sorted(samples)
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1) if len(xs) > 1 else 0.0
    return Stats(
        iters=calls or len(xs),
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
    """Whether the 95% confidence interval of the median is within ±2% of it. Distribution-free
    (order statistics n/2 ± 1.96·√n/2), so a heavy tail of late wake-ups, which keeps the mean's
    interval wide however long one waits, does not hold a latency-bound size to its whole budget."""
    xs = sorted(samples)
    n = len(xs)
    half = 1.96 * math.sqrt(n) / 2
    lo, hi = xs[max(0, math.floor(n / 2 - half))], xs[min(n - 1, math.ceil(n / 2 + half))]
    return (hi - lo) / 2 <= CI_REL * _quantile(xs, 0.5)


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


def batch_loop(run: Callable[[], None], iters: int, device: torch.device) -> list[float]:
    """The mean seconds per call of `iters` back-to-back calls, timed as one batch."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            run()
        end.record()
        end.synchronize()
        return [start.elapsed_time(end) / 1e3 / iters]
    t0 = time.perf_counter()
    for _ in range(iters):
        run()
    return [(time.perf_counter() - t0) / iters]


class GraphLoop:
    """Batches of calls captured in CUDA graphs (one per batch length) and replayed."""

    def __init__(self) -> None:
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}

    def __call__(self, run: Callable[[], None], iters: int, device: torch.device) -> list[float]:
        graph = self.graphs.get(iters) or self._capture(run, iters, device)
        return [batch_loop(graph.replay, 1, device)[0] / iters]

    def _capture(self, run: Callable[[], None], iters: int, device: torch.device) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        try:
            # thread_local: c10d's watchdog thread may query the stream while this one captures.
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                for _ in range(iters):
                    run()
        except RuntimeError as e:
            raise UsageError(f"--timing graph: these calls cannot be captured in a CUDA graph "
                             f"({one_line(e)}); use --timing loop") from None
        graph.replay()  # the first replay uploads the graph: keep it out of the timed ones
        torch.cuda.synchronize(device)
        self.graphs[iters] = graph
        return graph


Sampler = Callable[[Callable[[], None], int, torch.device], list[float]]


def sampler(mode: str) -> Sampler:
    return {"stamps": stamp_loop, "loop": batch_loop, "graph": GraphLoop()}[mode]


def time_op(
    run: Callable[[], None],
    device: torch.device,
    reduce: Callable[[list[float]], list[float]],
    iters: int | None,
    warmup: int,
    budget_s: float,
    mode: str = "stamps",
) -> Stats:
    """Warm up, then time `iters` calls, or (iters None) until the estimate is stable or the budget
    is spent. Stats.iters counts calls; the statistics are over samples (calls for stamps, batches
    for loop and graph)."""
    take = sampler(mode)
    first = reduce(stamp_loop(run, 1, device))[0]
    per_iter = max(first, 1e-7)
    extra_warmup = warmup - 1 if iters else min(warmup - 1, int(0.2 * budget_s / per_iter))
    if extra_warmup > 0:
        stamp_loop(run, extra_warmup, device)
    if iters:
        # loop and graph: the calls in 5 batches (or fewer), so that there is a spread.
        batches = 1 if mode == "stamps" else min(iters, MIN_AUTO_ITERS)
        sizes = [iters // batches + (i < iters % batches) for i in range(batches)]
        return summarize([x for size in sizes for x in reduce(take(run, size, device))], calls=iters)
    # A first call can be several times faster than the rest (a warm cache, a quiet moment): keep the
    # first batch to a twentieth of the budget, then size batches by what the calls really took.
    batch = max(1, min(MAX_BATCH, int(0.05 * budget_s / per_iter)))
    if mode != "stamps":
        batch = max(1, batch // MIN_AUTO_ITERS)  # a batch is one sample: leave room for several
    samples: list[float] = []
    calls, spent = 0, 0.0
    while True:
        got = reduce(take(run, batch, device))
        samples += got
        calls += batch
        spent += sum(got) * (batch if mode != "stamps" else 1)
        if len(samples) >= MIN_AUTO_ITERS and converged(samples):
            break
        if (spent >= budget_s and len(samples) >= MIN_ITERS) or calls >= MAX_AUTO_ITERS:
            break
        # At most doubling the calls so far: the stalls of a busy host show up only after a few
        # hundred calls, and a mean taken before them would overrun the budget several times.
        # loop and graph spread what is left over the samples still wanted.
        left = (budget_s - spent) / (max(spent, 1e-9) / calls)
        if mode != "stamps":
            left /= max(1, MIN_AUTO_ITERS - len(samples))
        batch = max(1, min(MAX_BATCH, calls, int(left)))
    return summarize(samples, calls=calls)
