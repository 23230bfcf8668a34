"""clusterbench's all_reduce against a bare torch.distributed loop, in one run, same ranks and sizes.

    python bench/bench_comm.py [--nproc 2] [--max-bytes 64M] [--rounds 5] [--no-rotate] [--sweep]

The bare loop is the minimal benchmark anyone would write: warm-up, then
`t0; for i in range(iters): all_reduce(x[i]); t1`, time per op = (t1 - t0) / iters, slowest rank,
where x[i] is the i-th window of one zeroed buffer of the largest size, as nccl-tests moves its
buffers (with --no-rotate, always the same buffer). clusterbench runs through
`comm.sweep.measure`, the same function the CLI uses (auto iterations, per-iteration stamps,
cross-rank reduction, the buffers moved through an arena of the largest size unless --no-rotate,
correctness check after timing). The two alternate size by size for several rounds and the
medians are compared, so that load from anything else on the machine hits both alike. `--sweep`
also times a full `clusterbench comm --ops all` sweep and prints its CV per size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from clusterbench.argtypes import size
from clusterbench.runtime import launch
from clusterbench.runtime.devices import synchronize
from clusterbench.runtime.dist import resolve
from clusterbench.shape import JobShape
from clusterbench.stages.comm.ops import OPS
from clusterbench.stages.comm.plan import resolve as resolve_plan
from clusterbench.stages.comm.records import CommOptions
from clusterbench.stages.comm.rotation import MAX_WINDOWS, Arena
from clusterbench.stages.comm.scopes import whole_job
from clusterbench.stages.comm.sizes import geometric
from clusterbench.stages.comm.sweep import measure
from clusterbench.units import human_bytes


def bare_loop_us(worker, nbytes: int, iters: int, warmup: int, memory: torch.Tensor | None) -> float:
    """With `memory` (zeros of the largest size), call i takes its i-th window of nbytes, round and round."""
    count = nbytes // 4
    windows = min(MAX_WINDOWS, memory.numel() // count) if memory is not None else 0
    xs = [memory[k * count:(k + 1) * count] for k in range(windows)] if windows >= 2 else \
        [torch.zeros(count, dtype=torch.float32, device=worker.device)]
    for i in range(warmup):
        dist.all_reduce(xs[i % len(xs)])
    synchronize(worker.device)
    t0 = time.perf_counter()
    for i in range(iters):
        dist.all_reduce(xs[i % len(xs)])
    synchronize(worker.device)
    t = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64, device=worker.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item() * 1e6


def compare(worker, cfg: dict, progress) -> None:
    results = []
    largest = max(cfg["sizes"])
    arena = Arena(largest, worker.device) if cfg["rotate"] else None
    memory = torch.zeros(largest // 4, dtype=torch.float32, device=worker.device) if cfg["rotate"] else None
    for nbytes in cfg["sizes"]:
        count = nbytes // 4
        ours, bare = [], []
        for _ in range(cfg["rounds"]):
            opts = CommOptions(ops=("all_reduce",), time_budget_s=cfg["budget"])
            shape = JobShape(worker.world_size, worker.device.type, worker.backend, None)
            plan = resolve_plan(opts, frozenset(), shape)
            row = measure(OPS["all_reduce"], worker, plan, count, whole_job(list(worker.members)), arena=arena)
            ours.append(row.duration_us)
            # The bare loop gets the same number of timed iterations clusterbench chose.
            bare.append(bare_loop_us(worker, nbytes, row.iters, opts.warmup, memory))
        results.append({"bytes": nbytes, "clusterbench_us": statistics.median(ours),
                        "bare_us": statistics.median(bare)})
    if worker.is_main:
        Path(cfg["out"]).write_text(json.dumps(results))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--min-bytes", type=size, default=8)
    p.add_argument("--max-bytes", type=size, default=64 * 2**20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--budget", type=float, default=CommOptions().time_budget_s)
    p.add_argument("--rotate", action=argparse.BooleanOptionalAction, default=True,
                   help="move both loops' buffers every call, as the CLI does by default")
    p.add_argument("--sweep", action="store_true", help="also time a full --ops all sweep")
    a = p.parse_args()
    sizes = geometric(a.min_bytes, a.max_bytes, 4)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        cfg = {"sizes": sizes, "rounds": a.rounds, "budget": a.budget, "rotate": a.rotate, "out": str(out)}
        launch.run(launch.Job(compare, cfg, resolve("auto", None, 300)), a.nproc)
        results = json.loads(out.read_text())
    factor = 2 * (a.nproc - 1) / a.nproc
    print(f"all_reduce float32, {a.nproc} ranks, median of {a.rounds} alternating rounds, "
          f"buffers {'moved every call' if a.rotate else 'fixed'}")
    print(f"{'size':>10} {'bare us':>10} {'ours us':>10} {'bare busbw Gbps':>16} {'ours busbw Gbps':>16} {'ratio':>6}")
    for r in results:
        bw = [r["bytes"] / (t * 1e-6) * factor * 8 / 1e9 for t in (r["bare_us"], r["clusterbench_us"])]
        print(f"{human_bytes(r['bytes']):>10} {r['bare_us']:10.1f} {r['clusterbench_us']:10.1f} "
              f"{bw[0]:16.3f} {bw[1]:16.3f} {bw[1] / bw[0]:6.3f}")
    large = [r["bare_us"] / r["clusterbench_us"] for r in results if r["bytes"] >= 2**20]
    small = [r["clusterbench_us"] / r["bare_us"] for r in results if r["bytes"] <= 4096]
    if large:
        print(f"busbw ratio from 1 MiB up: min {min(large):.3f}, median {statistics.median(large):.3f}")
    if small:
        print(f"latency ratio up to 4 KiB: max {max(small):.3f}, median {statistics.median(small):.3f}")
    if a.sweep:
        time_sweep(a.nproc)


def time_sweep(nproc: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "clusterbench", "comm", "--nproc", str(nproc), "--ops", "all",
                        "-b", "8", "-e", "64M", "--out", tmp], check=True, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - t0
        rows = json.loads((Path(tmp) / "run.json").read_text())["comm"]
    cvs = sorted(r["cv"] for r in rows)
    print(f"\nfull sweep --ops all 8 B..64 MiB on {nproc} gloo ranks: {seconds:.1f} s wall, {len(rows)} rows")
    print(f"CV per size: median {statistics.median(cvs):.3f}, p90 {cvs[int(0.9 * (len(cvs) - 1))]:.3f}, "
          f"max {cvs[-1]:.3f}")
    for op in dict.fromkeys(r["op"] for r in rows):
        mine = [r for r in rows if r["op"] == op]
        print(f"  {op:>14}: " + " ".join(f"{r['cv']:.2f}" for r in mine))


if __name__ == "__main__":
    main()
