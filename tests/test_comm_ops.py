"""Every op in the table does what the collective means, on real gloo ranks (n = 2, 3, 4).

The expectations here are computed independently, from the inputs each rank actually held,
so they check both the op entries and the harness's own `expected` values.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from clusterbench.runtime import launch
from clusterbench.runtime.dist import resolve
from clusterbench.stages.comm.ops import OPS
from clusterbench.stages.comm.records import CommOptions
from clusterbench.stages.comm.scopes import Team
from clusterbench.stages.comm.sweep import _ctx

REDUCE = {"sum": lambda xs: sum(xs[1:], xs[0].clone()), "max": lambda xs: torch.stack(xs).amax(0),
          "min": lambda xs: torch.stack(xs).amin(0), "prod": lambda xs: torch.stack(xs).prod(0)}
CASES = [(op, red, in_place) for op in OPS for red in (REDUCE if OPS[op].facts.reduces else ["sum"])
         for in_place in (False, True)]


def record_ops(worker, payload: tuple[Path, bool], progress) -> None:
    """Run every case once on check values; save what this rank held before and after.

    With `skip_first`, the ops run in a team of ranks 1..n-1 (a process group of its own, as
    the intra/inter scopes make), so every root and peer must be translated to a global rank."""
    out_dir, skip_first = payload
    ranks = tuple(range(1 if skip_first else 0, worker.world_size))
    group = torch.distributed.new_group(list(ranks)) if skip_first else None
    team = Team("intra" if skip_first else "global", "t", ranks, 1, group)
    if worker.rank not in ranks:
        return
    saved = {}
    for name, red, in_place in CASES:
        op = OPS[name]
        opts = CommOptions(ops=(name,), dtype="float32", reduce_op=red, in_place=in_place, root=1)
        ctx = _ctx(op, worker, opts, op.facts.granularity(len(ranks)) * 5, False, team)
        bufs = op.buffers(ctx)
        before = {k: v.clone() for k, v in bufs.items()}
        op.run(ctx, bufs)
        saved[(name, red, in_place)] = {
            "in": before.get("in", before.get("out")), "out": bufs.get("out"),
            "harness_expected": _whole(op.expected(ctx, bufs), bufs.get("out")), "chunk": ctx.chunk,
        }
    torch.save(saved, out_dir / f"rank{team.rank_of(worker.rank)}.pt")


def _whole(want, out):
    return None if want is None else want(0, out.numel())


def meaning(name: str, red: str, rank: int, n: int, ins: list, chunk: int, root: int):
    """What rank `rank` must hold after the collective, from the definition of the collective."""
    part = slice(rank * chunk, (rank + 1) * chunk)
    if name == "all_reduce":
        return REDUCE[red](ins)
    if name == "reduce":
        return REDUCE[red](ins) if rank == root else None
    if name == "all_gather":
        return torch.cat(ins)
    if name == "reduce_scatter":
        return REDUCE[red](ins)[part]
    if name == "all_to_all":
        return torch.cat([ins[j][part] for j in range(n)])
    if name == "broadcast":
        return ins[root]
    if name == "gather":
        return torch.cat([ins[r] for r in range(n)]) if rank == root else None
    if name == "scatter":
        return ins[root][part]
    if name == "sendrecv":
        return ins[(rank - 1) % n]
    if name == "incast":
        return torch.cat([ins[r] for r in range(n) if r != root]) if rank == root else None
    peer = rank ^ 1
    if peer >= n:
        return None
    if name == "pt2pt":
        return ins[peer] if rank % 2 == 1 else None
    return ins[peer]  # pt2pt_bidir


@pytest.mark.parametrize("world, skip_first", [(2, False), (3, False), (4, False), (4, True)])
def test_every_op_means_what_it_says(world: int, skip_first: bool, tmp_path: Path) -> None:
    job = launch.Job(record_ops, (tmp_path, skip_first), resolve("gloo", "cpu", 60))
    assert launch.run(job, world) == launch.Outcome(0)
    n = world - skip_first
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(n)]
    for case in CASES:
        name, red, _ = case
        ins = [ranks[r][case]["in"] for r in range(n)]
        for r in range(n):
            got = ranks[r][case]
            want = meaning(name, red, r, n, ins, got["chunk"], root=1)
            if want is None:
                assert got["harness_expected"] is None, case
                continue
            assert torch.equal(got["out"], want), (case, r, got["out"], want)
            assert torch.equal(got["harness_expected"], want), (case, r)
