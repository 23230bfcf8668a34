"""The pure parts of the comm benchmark: sizes, statistics, the printed table."""

from __future__ import annotations

import argparse
import itertools
import math
from types import SimpleNamespace

import pytest
import torch

from clusterbench.argtypes import size
from clusterbench.errors import UsageError
from clusterbench.shape import JobShape
from clusterbench.stages.comm import plan, table, timing
from clusterbench.stages.comm.records import CommOptions, CommRow
from clusterbench.stages.comm.sizes import count_for, geometric
from clusterbench.stages.comm.timing import converged, summarize


@pytest.mark.parametrize("text, want", [("8", 8), ("256K", 256 * 1024), ("64M", 64 * 2**20), ("1G", 2**30),
                                        ("1.5K", 1536), ("4 MiB", 4 * 2**20), ("2kb", 2048)])
def test_parse_size(text: str, want: int) -> None:
    assert size(text) == want


@pytest.mark.parametrize("text", ["", "-1", "0", "12Q", "K", "1e3"])
def test_parse_size_refuses(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        size(text)


def test_sweep_is_geometric_and_keeps_the_maximum() -> None:
    assert geometric(8, 64, 2) == [8, 16, 32, 64]
    assert geometric(8, 100, 2) == [8, 16, 32, 64, 100]
    assert geometric(1000, 1000, 2) == [1000]
    assert geometric(10, 30, 1.5) == [10, 15, 22, 30]


def test_count_rounds_to_whole_elements_and_chunks() -> None:
    assert count_for(1000, 4, 1) == 250
    assert count_for(1000, 4, 3) == 249
    assert count_for(8, 4, 4) == 4  # never below one element per rank
    assert count_for(3, 8, 1) == 1


def test_summary_statistics() -> None:
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s.iters == 5 and s.mean_s == 22.0 and s.p50_s == 3.0 and s.min_s == 1.0 and s.max_s == 100.0
    assert s.p99_s == pytest.approx(4 + 0.96 * 96)
    assert s.cv == pytest.approx(math.sqrt(sum((x - 22) ** 2 for x in [1, 2, 3, 4, 100]) / 4) / 22)


def test_auto_iterations_spend_the_budget_on_small_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    """--iters auto, on a clock the test drives: a noisy 10 us op fills the 50 ms budget with
    thousands of iterations, a 10 ms one stops at the few the budget holds."""
    now = [0.0]
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: now[0]))

    def op(seconds: float):
        spread = itertools.cycle([0.5, 1.5])  # CV 0.5: the 2% interval would need ~2,400 samples

        def run() -> None:
            now[0] += seconds * next(spread)
        return run

    cpu, same = torch.device("cpu"), (lambda samples: samples)
    small = timing.time_op(op(1e-5), cpu, same, None, 5, 0.05)
    large = timing.time_op(op(1e-2), cpu, same, None, 5, 0.05)
    assert small.iters > 2000 and 3 <= large.iters <= 6
    assert small.mean_s == pytest.approx(1e-5, rel=0.01) and large.mean_s == pytest.approx(1e-2, rel=0.2)


def test_convergence_needs_a_tight_confidence_interval() -> None:
    assert converged([1.0] * 5)
    assert not converged([1.0, 2.0] * 5)
    assert converged([1.0, 1.02] * 500)


def _row(**kw) -> CommRow:
    base = {"op": "all_reduce", "size_bytes": 1024, "count": 256, "dtype": "float32", "world_size": 2,
            "in_place": True, "duration_us": 10.0, "throughput_gbps": 0.8192, "busbw_gbps": 0.8192, "wrong": 0,
            "iters": 10, "p50_us": 10.0, "p99_us": 11.0, "min_us": 9.0, "max_us": 12.0, "cv": 0.1,
            "reduce_op": "sum"}
    return CommRow(**{**base, **kw})


def test_table_line_and_units() -> None:
    assert "Throughput (GB/s)" in table.header("all_reduce", "GBps")
    line = table.line(_row(), "Gbps", checked=True)
    assert line.split()[:5] == ["1024", "256", "x", "float32", "sum"] and "10.00 us" in line
    assert "0.102" in table.line(_row(), "GBps", checked=True)  # Gbps / 8
    assert table.line(_row(world_size=1), "Gbps", checked=True).split()[-2] == "-"  # no busbw for n = 1
    assert table.line(_row(), "Gbps", checked=False).split()[-1] == "-"


def test_summary_is_the_mean_busbw_over_sizes() -> None:
    rows = [_row(busbw_gbps=1.0), _row(busbw_gbps=3.0, wrong=2)]
    text = table.summary("all_reduce", rows, "Gbps", checked=True)
    assert "Avg bus bandwidth 2.000 Gbps over 2 sizes" in text and "2 wrong elements: FAILED" in text


def test_loop_timing_takes_one_sample_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """--timing loop on a clock the test drives: one clock read around each batch, the mean per call."""
    now, reads = [0.0], [0]

    def clock() -> float:
        reads[0] += 1
        return now[0]

    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=clock))

    def run() -> None:
        now[0] += 1e-4

    stats = timing.time_op(run, torch.device("cpu"), lambda samples: samples, 100, 1, 0.05, mode="loop")
    assert stats.iters == 100 and stats.mean_s == pytest.approx(1e-4) and stats.cv == pytest.approx(0, abs=1e-9)
    assert reads[0] <= 2 * 5 + 2  # a read before and after each of the 5 batches (and the first call's stamps)
    auto = timing.time_op(run, torch.device("cpu"), lambda samples: samples, None, 1, 0.05, mode="loop")
    assert auto.iters >= timing.MIN_AUTO_ITERS and auto.mean_s == pytest.approx(1e-4)


def test_loop_timing_runs_exactly_the_calls_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = [0]
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: float(calls[0])))

    def run() -> None:
        calls[0] += 1

    stats = timing.time_op(run, torch.device("cpu"), lambda samples: samples, 12, 1, 0.05, mode="loop")
    assert stats.iters == 12 and calls[0] == 1 + 12  # the first (warm-up) call, then 12 in 5 batches


def test_a_forced_nccl_algorithm_takes_only_the_ops_nccl_runs_with_it() -> None:
    nccl = JobShape(2, "cuda", "nccl", None)
    with pytest.raises(UsageError, match="--nccl-algo tree: NCCL runs only all_reduce with it, not all_gather"):
        plan.resolve(CommOptions(ops=("all_reduce", "all_gather"), nccl_algos=("tree",)), frozenset(), nccl)
    resolved = plan.resolve(CommOptions(ops=("all_gather",), nccl_algos=("ring", "nvls", "pat")), frozenset(), nccl)
    assert resolved.scopes == ("algo",)  # the algorithms side by side, in place of the whole-job sweep
