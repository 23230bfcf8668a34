"""The check values stay exact and telling at any world size, and the check's memory is bounded."""

from __future__ import annotations

import gc
import resource
from pathlib import Path

import pytest
import torch

from clusterbench.runtime import launch
from clusterbench.runtime.dist import resolve
from clusterbench.stages.comm.ops import OPS
from clusterbench.stages.comm.records import CommOptions
from clusterbench.stages.comm.scopes import whole_job
from clusterbench.stages.comm.sweep import _ctx, check
from clusterbench.stages.comm.values import _EXACT, DTYPES, Values

COUNT = 4099  # not a multiple of anything the patterns use
CPU = torch.device("cpu")
REDUCE = {"sum": lambda xs: xs.sum(0), "avg": lambda xs: xs.sum(0), "max": lambda xs: xs.amax(0),
          "min": lambda xs: xs.amin(0), "prod": lambda xs: xs.prod(0)}


def every_rank(v: Values) -> torch.Tensor:
    return torch.stack([v.pattern(r, COUNT, 17).to(torch.float64) for r in range(v.n)])


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 9, 64])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", list(REDUCE))
def test_reductions_are_exact_and_every_rank_counts(n: int, dtype: str, op: str) -> None:
    v = Values(DTYPES[dtype], CPU, op, n, zeros=False)
    xs = every_rank(v)
    truth = REDUCE[op](xs)
    assert truth.abs().max() <= _EXACT[v.dtype]  # no rounding anywhere: the check can demand exact results
    want = v.reduced(COUNT, 17).to(torch.float64)
    if op == "avg" and v.dtype.is_floating_point:
        assert torch.allclose(want, truth / n, rtol=0, atol=1e-12)
    elif op == "avg":
        assert torch.equal(want, torch.div(truth, n, rounding_mode="floor"))  # integers divide the exact sum
    else:
        assert torch.equal(want, truth)
    assert len(truth.unique()) > 1  # a constant result would let a broken collective pass
    for r in range(n):
        mine = xs[r]
        # Dropping rank r's contribution changes the result somewhere (prod: where r doubles).
        others = REDUCE[op](torch.cat([xs[:r], xs[r + 1:]])) if n > 1 else None
        if others is not None and op != "prod":
            assert (others != truth).any(), (r, "rank r's values never matter")
        assert mine.ne(mine[0]).any() or op == "prod"


@pytest.mark.parametrize("n", [1, 2, 3, 12, 64, 4099])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
@pytest.mark.parametrize("op", [None, *REDUCE])
def test_a_period_copied_over_is_every_element_computed(n: int, dtype: str, op: str | None) -> None:
    """The check computes one period of the values and copies it on (chunk by chunk where the period
    is long: 4099 ranks): the same values as computing each element, from any offset."""
    v = Values(DTYPES[dtype], CPU, op, n, zeros=False)
    count = min(3 * v.period + 17, 50_000)
    idx = torch.arange(5, 5 + count)
    for rank in {0, n // 2, n - 1}:
        assert torch.equal(v.pattern(rank, count, 5), v._raw(rank, idx).to(v.dtype)), rank
    if op is not None:  # what a reduction must give: data movement reduces nothing
        want = v._reduced(idx).to(torch.float64 if op == "avg" else v.dtype)
        assert torch.equal(v.reduced(count, 5), want)


@pytest.mark.parametrize("n", [2, 3, 64, 300])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_data_movement_tells_ranks_apart(n: int, dtype: str) -> None:
    v = Values(DTYPES[dtype], CPU, None, n, zeros=False)
    patterns = every_rank(v)
    distinct = {tuple(p[:64].tolist()) for p in patterns}
    assert len(distinct) == min(n, 251 if v.top >= 250 else v.top + 1)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("n", [3, 5, 6, 7, 12, 64])
def test_avg_tolerance_covers_any_order_of_rounded_terms(dtype: str, n: int) -> None:
    """Emulate NCCL's avg: each term pre-scaled by a rounded 1/n, then added in the dtype in some order."""
    v = Values(DTYPES[dtype], CPU, "avg", n, zeros=False)
    xs = torch.stack([v.pattern(r, COUNT) for r in range(n)])
    scale = torch.tensor(1 / n, dtype=v.dtype)
    exact = v.reduced(COUNT)
    for order in (range(n), reversed(range(n)), torch.randperm(n, generator=torch.Generator().manual_seed(n))):
        acc = torch.zeros(COUNT, dtype=v.dtype)
        for r in order:
            acc = acc + xs[int(r)] * scale
        assert v.mismatches(acc, lambda a, b: exact[a:b]) == 0
    # A rank's smallest contribution missing (1/n of the mean) is never taken for rounding.
    missing = (exact - 1 / n).to(v.dtype)
    assert v.mismatches(missing, lambda a, b: exact[a:b]) == COUNT


def corrupt_each_dtype(worker, out_dir: Path, progress) -> None:
    """Per dtype and op: the check finds nothing in a clean run and exactly one element corrupted on rank 1."""
    found = {}
    for dtype in DTYPES:
        for name, red in (("all_reduce", "sum"), ("all_reduce", "max"), ("all_gather", "sum"), ("broadcast", "sum")):
            opts = CommOptions(ops=(name,), dtype=dtype, reduce_op=red)
            op = OPS[name]
            team = whole_job(list(worker.members))
            ctx = _ctx(op, worker, opts, op.facts.granularity(worker.world_size) * 1000, False, team)
            clean = check(op, ctx)
            bufs = op.buffers(ctx)
            op.run(ctx, bufs)
            if worker.rank == 1:
                bufs["out"].view(-1)[7] += 1
            found[(dtype, name, red)] = (clean, ctx.values.mismatches(bufs["out"], op.expected(ctx, bufs)))
    torch.save(found, out_dir / f"rank{worker.rank}.pt")


@pytest.mark.parametrize("n", [2, 3, 4])
def test_a_corrupted_element_is_caught_for_every_dtype(n: int, tmp_path: Path) -> None:
    assert launch.run(launch.Job(corrupt_each_dtype, tmp_path, resolve("gloo", "cpu", 60)), n) == launch.Outcome(0)
    for rank in range(n):
        for case, (clean, corrupted) in torch.load(tmp_path / f"rank{rank}.pt").items():
            assert clean == 0, (rank, case)
            assert corrupted == (1 if rank == 1 else 0), (rank, case)


def check_at_256_mib(worker, out_file: Path, progress) -> None:
    op = OPS["all_reduce"]
    ctx = _ctx(op, worker, CommOptions(), 64 * 1024**2, False, whole_job(list(worker.members)))
    # What the check allocates, not the heap this rank was forked with: a collection walking that heap would
    # copy its pages (the pytest worker's, whatever other tests imported), which counts as grown.
    gc.freeze()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    wrong = check(op, ctx)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    out_file.write_text(f"{wrong} {grown}")


def test_the_check_needs_its_buffer_and_a_bounded_scratch(tmp_path: Path) -> None:
    out = tmp_path / "rss"
    assert launch.run(launch.Job(check_at_256_mib, out, resolve("gloo", "cpu", 120)), 1) == launch.Outcome(0)
    wrong, grown = map(int, out.read_text().split())
    assert wrong == 0
    # The 256 MiB buffer itself, plus chunk temporaries: far from the int64 copies (2 GiB+) of the whole buffer.
    assert grown < 256 * 1024**2 + 160 * 1024**2, grown
