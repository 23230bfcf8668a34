"""Buffers that move every call (--rotate, on by default, as nccl-tests moves them): where each
call's buffers lie, that every op still means what it says at a moved offset and writes nothing
outside its window, that timing leaves the memory zero, and the option as users see it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import read_run, run_cli

from clusterbench.runtime import launch
from clusterbench.runtime.dist import resolve
from clusterbench.stages.comm.ops import OPS, Ctx
from clusterbench.stages.comm.records import CommOptions
from clusterbench.stages.comm.rotation import MAX_WINDOWS, Arena, rotating, windows
from clusterbench.stages.comm.scopes import whole_job
from clusterbench.stages.comm.sweep import _ctx
from clusterbench.stages.comm.values import Values

CPU = torch.device("cpu")
CASES = [(op, red, in_place) for op in OPS for red in (("sum", "max") if OPS[op].facts.reduces else ("sum",))
         for in_place in (False, True)]


def timing_ctx(name: str, count: int, in_place: bool = False, rank: int = 0, n: int = 2) -> Ctx:
    """What the sweep times with: zeros, laid out by the op table (no process group needed to lay out)."""
    reduce_op = "sum" if OPS[name].facts.reduces else None
    return Ctx(rank=rank, n=n, count=count, dtype=torch.float32, device=CPU, root=0, reduce_op="sum",
               in_place=in_place, values=Values(torch.float32, CPU, reduce_op, n, zeros=True))


def test_each_call_takes_the_next_window_of_the_largest_size() -> None:
    arena = Arena(64 * 1024, CPU)
    moved = windows(OPS["all_reduce"], timing_ctx("all_reduce", 256), arena)
    assert moved is not None and len(moved) == 64  # 64 KiB // 1 KiB, as nccl-tests' steps
    starts = [w["out"].data_ptr() - arena.slot(0).data_ptr() for w in moved]
    assert starts == [k * 1024 for k in range(64)]
    # Two buffers of their own: each walks its own memory, in steps of its own size.
    moved = windows(OPS["reduce_scatter"], timing_ctx("reduce_scatter", 256), arena)
    assert [w["in"].data_ptr() - arena.slot(0).data_ptr() for w in moved[:3]] == [0, 1024, 2048]
    assert [w["out"].data_ptr() - arena.slot(1).data_ptr() for w in moved[:3]] == [0, 512, 1024]
    # In place, the input stays the rank's chunk of the same window's output.
    for rank in (0, 1):
        moved = windows(OPS["all_gather"], timing_ctx("all_gather", 256, in_place=True, rank=rank), arena)
        assert all(w["in"].data_ptr() == w["out"].data_ptr() + rank * 512 for w in moved)


def test_a_tiny_message_walks_at_most_max_windows_and_the_largest_does_not_move() -> None:
    arena = Arena(64 * 1024, CPU)
    assert len(windows(OPS["all_reduce"], timing_ctx("all_reduce", 2), arena)) == MAX_WINDOWS
    # Half the arena fits twice; more than half does not (nccl-tests: steps = 1), and the memory goes back.
    assert len(windows(OPS["all_reduce"], timing_ctx("all_reduce", 8 * 1024), arena)) == 2
    assert windows(OPS["all_reduce"], timing_ctx("all_reduce", 8 * 1024 + 1), arena) is None
    assert arena._slots == []


def check_at_moved_offsets(worker, out_dir: Path, progress) -> None:
    """Per case: check values in the last window, the op run there, then that window zeroed again;
    then the op run round every window (of the rank with the most) twice on zeros, as timing does.
    Saved: wrong elements, and whether the arena held anything but zeros after each part."""
    team = whole_job(list(worker.members))
    found = {}
    for name, red, in_place in CASES:
        op = OPS[name]
        opts = CommOptions(ops=(name,), reduce_op=red, in_place=in_place, root=1)
        count = op.facts.granularity(worker.world_size) * 5
        arena = Arena(8 * count * 4 * worker.world_size, worker.device)  # incast's root holds n - 1 buffers
        timing = _ctx(op, worker, opts, count, True, team)
        moved = windows(op, timing, arena) or [{}]  # pt2pt's odd rank out has no buffers to move
        last = moved[-1]
        checked = _ctx(op, worker, opts, count, False, team)
        for key, values in op.buffers(checked).items():
            last[key].copy_(values)
        op.run(checked, last)
        want = op.expected(checked, last)
        wrong = 0 if want is None else checked.values.mismatches(last["out"], want)
        for t in last.values():
            t.zero_()
        outside = any(s.any() for s in arena._slots)
        run = rotating(op, timing, moved)
        calls = torch.tensor([2 * len(moved)])  # a rooted op's ranks hold buffers of different sizes
        torch.distributed.all_reduce(calls, op=torch.distributed.ReduceOp.MAX)
        for _ in range(int(calls)):
            run()
        found[(name, red, in_place)] = (wrong, outside, any(s.any() for s in arena._slots))
    torch.save(found, out_dir / f"rank{worker.rank}.pt")


@pytest.mark.parametrize("n", [2, 3])
def test_every_op_is_right_at_a_moved_offset_and_stays_in_its_window(n: int, tmp_path: Path) -> None:
    assert launch.run(launch.Job(check_at_moved_offsets, tmp_path, resolve("gloo", "cpu", 60)), n) == launch.Outcome(0)
    for rank in range(n):
        for case, (wrong, outside, after_timing) in torch.load(tmp_path / f"rank{rank}.pt").items():
            assert wrong == 0, (rank, case)
            assert not outside, (rank, case, "the op wrote outside its window")
            assert not after_timing, (rank, case, "timing left non-zero values behind")


def test_the_option_in_help_and_run_json_with_values_still_checked(tmp_path: Path) -> None:
    helped = run_cli("comm", "--help")
    assert "--rotate, --no-rotate" in helped.stdout and "nccl-tests" in helped.stdout
    assert "--comm.rotate, --no-comm.rotate" in run_cli("run", "--help").stdout
    sweep = ["comm", "--nproc", "2", "--ops", "all_reduce,all_gather", "-b", "8", "-e", "64K", "-f", "8",
             "--iters", "20", "--warmup", "1"]
    on = run_cli(*sweep, "--out", str(tmp_path / "on"), env={"CLUSTERBENCH_TEST_CORRUPT": "all_gather:1"})
    assert on.returncode == 1 and "all_gather" in on.stderr  # a wrong element is still caught while moving
    doc = read_run(tmp_path / "on")
    assert doc["comm_options"]["rotate"] is True
    assert {r["op"]: r["wrong"] for r in doc["comm"] if r["size_bytes"] == 8} == {"all_reduce": 0, "all_gather": 1}
    off = run_cli(*sweep, "--no-rotate", "--out", str(tmp_path / "off"))
    assert off.returncode == 0, off.stderr
    doc = read_run(tmp_path / "off")
    assert doc["comm_options"]["rotate"] is False and all(r["wrong"] == 0 for r in doc["comm"])
