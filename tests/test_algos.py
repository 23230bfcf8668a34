"""The send/recv algorithms give, element for element, what the native op gives (n = 2..5 gloo ranks).

Each rank runs the native op and every algorithm for it on the same check values, in several
dtypes, reductions, roots, in place or not, and at counts that n does not divide (the ring's pieces
are then uneven, and with fewer elements than ranks some are empty). The n = 5 job also runs
everything in a team of ranks 1..4, a process group of its own, where every peer must be
translated to a global rank.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import assert_one_line_error, read_run, run_cli

from clusterbench.runtime import launch
from clusterbench.runtime.dist import resolve
from clusterbench.stages.comm.algos import ALGOS, variant
from clusterbench.stages.comm.ops import OPS
from clusterbench.stages.comm.records import CommOptions
from clusterbench.stages.comm.scopes import Team
from clusterbench.stages.comm.sweep import _ctx

DTYPES = ("float32", "bfloat16", "int32")


def _cases(n: int):
    for algo in ALGOS:
        op = OPS[algo.op]
        gran = op.facts.granularity(n)
        counts = (gran * 7, gran * 1000 + (0 if op.facts.chunked else 3), 1 if not op.facts.chunked else gran)
        for dtype in DTYPES:
            for red in (("sum", "max", "min") if op.facts.reduces else ("sum",)):
                for count in counts:
                    for root in ((0, n - 1) if algo.name in ("reduce_bcast", "chain", "binomial") else (0,)):
                        for in_place in ((False, True) if algo.op in ("all_gather", "reduce_scatter") else (False,)):
                            yield algo, CommOptions(ops=(algo.op,), dtype=dtype, reduce_op=red, root=root,
                                                    in_place=in_place), count


def _compare(worker, team: Team) -> list[str]:
    """Every case on this rank: what differs from the native op or from the expected values."""
    n = len(team.ranks)
    bad = []
    for algo, opts, count in _cases(n):
        native, mine = OPS[algo.op], variant(algo.op, algo.name)
        ctx = _ctx(native, worker, opts, count, False, team)
        want, got = native.buffers(ctx), mine.buffers(ctx)
        before = {k: v.clone() for k, v in got.items() if k == "in" and not ctx.in_place}
        native.run(ctx, want)
        mine.run(ctx, got)
        expected = native.expected(ctx, want)
        case = f"{algo.name} {algo.op} n={n} {opts.dtype} {opts.reduce_op} root={opts.root} " \
               f"in_place={opts.in_place} count={count} rank={ctx.rank}"
        if not torch.equal(want["out"], got["out"]):
            bad.append(f"{case}: differs from native")
        if expected is not None and ctx.values.mismatches(got["out"], expected):
            bad.append(f"{case}: wrong values")
        if any(not torch.equal(v, got[k]) for k, v in before.items()):
            bad.append(f"{case}: changed its input")
    return bad


def compare_all(worker, out_dir: Path, progress) -> None:
    whole = Team("global", "all", tuple(range(worker.world_size)), 1)
    bad = _compare(worker, whole)
    if worker.world_size == 5:
        ranks = (1, 2, 3, 4)
        team = Team("intra", "t", ranks, 1, torch.distributed.new_group(list(ranks)))
        if worker.rank in ranks:
            bad += _compare(worker, team)
    (out_dir / f"rank{worker.rank}.json").write_text(json.dumps(bad))


@pytest.mark.parametrize("world", [2, 3, 4, 5])
def test_every_algorithm_matches_the_native_op(world: int, tmp_path: Path) -> None:
    job = launch.Job(compare_all, tmp_path, resolve("gloo", "cpu", 120))
    assert launch.run(job, world) == launch.Outcome(0)
    bad = [line for r in range(world) for line in json.loads((tmp_path / f"rank{r}.json").read_text())]
    assert not bad, "\n".join(bad[:20])


def test_cli_puts_ring_beside_native(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("comm", "--algo", "native,ring", "--ops", "all_reduce", "-b", "64K", "-e", "64K",
                   "--iters", "3", "--warmup", "1", "--nproc", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "algorithm ring from send/recv" in proc.stdout
    rows = read_run(out)["comm"]
    assert sorted((r["algo"], r["scope"], r["wrong"]) for r in rows) == [("native", "global", 0), ("ring", "algo", 0)]
    assert "algo" in (out / "comm.csv").read_text().splitlines()[0].split(",")


@pytest.mark.parametrize("args, needle", [
    (["--algo", "native,warp"], "unknown algorithm 'warp'"),
    (["--algo", "chain", "--ops", "all_reduce"], "--algo chain implements none of all_reduce"),
    (["--algo", "ring", "--reduce-op", "avg"], "not avg"),
])
def test_bad_algorithm_is_one_line_and_exit_2(args: list[str], needle: str, tmp_path: Path) -> None:
    proc = run_cli("comm", "-e", "1K", "--out", str(tmp_path / "run"), *args)
    assert_one_line_error(proc, 2, needle)
