"""Ring all_reduce built from send/recv (stages/comm/algos.py) against the backend's own all_reduce.

    python bench/bench_algos.py [--nproc 2,3,4] [--size 16M] [--rounds 7] [--iters 10]

Both run on the same ranks in one job, alternating round by round (native, ring, native, ...) so
load from anything else on the machine hits both alike. Each round times `iters` back-to-back
calls, slowest rank; the medians give busbw (2(n-1)/n x S / t) and the ratio ring / native,
which issue 12 wants >= 0.8 at 16 MiB on 2..4 ranks.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist

from clusterbench.argtypes import size
from clusterbench.runtime import launch
from clusterbench.runtime.dist import resolve
from clusterbench.stages.comm.algos import variant
from clusterbench.stages.comm.ops import OPS
from clusterbench.stages.comm.records import CommOptions
from clusterbench.stages.comm.scopes import whole_job
from clusterbench.stages.comm.sweep import _ctx


def _round_s(run, iters: int) -> float:
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        run()
    t = torch.tensor([time.perf_counter() - t0])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item() / iters


def compare(worker, payload: tuple[Path, int, int, int], progress) -> None:
    out, nbytes, rounds, iters = payload
    op = OPS["all_reduce"]
    ctx = _ctx(op, worker, CommOptions(), nbytes // 4, True, whole_job(list(worker.members)))
    calls = {algo: partial(variant("all_reduce", algo).run, ctx, op.buffers(ctx)) for algo in ("native", "ring")}
    times: dict[str, list[float]] = {algo: [] for algo in calls}
    for algo, call in calls.items():  # warm-up
        _round_s(call, 2)
    for _ in range(rounds):
        for algo, call in calls.items():
            times[algo].append(_round_s(call, iters))
    if worker.rank == 0:
        out.write_text(json.dumps({algo: statistics.median(ts) for algo, ts in times.items()}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", default="2,3,4")
    p.add_argument("--size", type=size, default=16 * 1024**2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--iters", type=int, default=10)
    a = p.parse_args()
    print(f"all_reduce {a.size} B float32 sum, gloo, median of {a.rounds} alternating rounds of {a.iters} calls")
    print(f"{'n':>3} {'native busbw Gbps':>18} {'ring busbw Gbps':>16} {'ring / native':>14}")
    for n in (int(x) for x in a.nproc.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "t.json"
            job = launch.Job(compare, (path, a.size, a.rounds, a.iters), resolve("gloo", "cpu", 600))
            assert launch.run(job, n) == launch.Outcome(0)
            t = json.loads(path.read_text())
        bus = {algo: a.size * 2 * (n - 1) / n / s * 8 / 1e9 for algo, s in t.items()}
        print(f"{n:>3} {bus['native']:>18.3f} {bus['ring']:>16.3f} {bus['ring'] / bus['native']:>14.3f}")


if __name__ == "__main__":
    main()
