"""`clusterbench comm`: options in, ranks launched, run folder out."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from clusterbench import launch
from clusterbench.comm.bench import CommOptions, parse_ops, run_comm, validate
from clusterbench.comm.sizes import human, parse_size, sweep
from clusterbench.comm.table import UNITS
from clusterbench.comm.timing import RANK_TIME
from clusterbench.comm.values import dtype_named
from clusterbench.dist import DistConfig, Worker, resolve
from clusterbench.errors import UsageError
from clusterbench.hw.command import record_hardware
from clusterbench.launch import Progress
from clusterbench.results import RunFolder, default_run_dir, prepare_run_dir

CPU_MAX_BYTES = 64 * 1024**2
GPU_MAX_BYTES = 1024**3


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ops", default="all_reduce", help="comma-separated ops, or 'all' (default: all_reduce)")
    p.add_argument("-b", "--min-bytes", default="8", help="smallest message (suffixes K, M, G; default 8)")
    p.add_argument("-e", "--max-bytes", default=None, help="largest message (default 64M on CPU, 1G on GPU)")
    p.add_argument("-f", "--step-factor", type=float, default=2.0, help="size multiplier per step (default 2)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--reduce-op", default="sum", help="sum, avg, max, min, prod")
    p.add_argument("--in-place", action="store_true", help="run all_gather / reduce_scatter in place")
    p.add_argument("--root", type=int, default=0, help="root rank of broadcast, reduce, gather, scatter")
    p.add_argument("--bidirectional", action="store_true", help="pt2pt: send both ways at once")
    p.add_argument("--iters", default="auto", help="timed iterations per size, or auto (default)")
    p.add_argument("--warmup", type=int, default=5, help="warm-up iterations per size (default 5)")
    p.add_argument("--time-budget", type=float, default=0.25,
                   help="--iters auto: seconds of timed iterations per size at most (default 0.25)")
    p.add_argument("--rank-time", choices=RANK_TIME, default="max",
                   help="how per-rank times combine (default max: the slowest rank)")
    p.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                   help="verify every output element after timing (default on)")
    p.add_argument("--unit", choices=tuple(UNITS), default="Gbps", help="bandwidth unit (default Gbps)")


def add_launch_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nproc", type=int, default=None, help="local ranks to spawn (default: GPU count, else 2)")
    p.add_argument("--backend", default="auto", help="auto, nccl, gloo, mpi or a registered backend name")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds any collective may take (default 300)")
    p.add_argument("--out", default=None, help="run folder (default runs/<UTC time>-<command>)")


def options_from(args: argparse.Namespace, cfg: DistConfig) -> CommOptions:
    try:
        dtype = dtype_named(args.dtype)
    except KeyError:
        raise UsageError(f"unknown dtype {args.dtype!r}: choose from float32, float16, bfloat16, "
                         "float64, int32, int64, int8, uint8") from None
    default_max = GPU_MAX_BYTES if cfg.device_type == "cuda" else CPU_MAX_BYTES
    max_bytes = parse_size(args.max_bytes, "--max-bytes") if args.max_bytes else default_max
    sizes = sweep(parse_size(args.min_bytes, "--min-bytes"), max_bytes, args.step_factor)
    iters = None if str(args.iters) == "auto" else _positive_int(args.iters, "--iters")
    if not (math.isfinite(args.time_budget) and args.time_budget > 0):
        raise UsageError(f"--time-budget must be positive, got {args.time_budget:g}")
    return CommOptions(
        ops=parse_ops(args.ops, args.bidirectional), sizes=tuple(sizes), dtype=str(dtype).removeprefix("torch."),
        reduce_op=args.reduce_op, in_place=args.in_place, root=args.root, iters=iters,
        warmup=args.warmup, time_budget_s=args.time_budget, rank_time=args.rank_time,
        check=args.check, unit=args.unit,
        fit_device_memory=cfg.device_type == "cuda" and args.max_bytes is None,
    )


def _positive_int(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{what} must be a whole number or auto, got {text!r}") from None
    if value < 1:
        raise UsageError(f"{what} must be at least 1, got {value}")
    return value


def world_size(args: argparse.Namespace, cfg: DistConfig) -> int:
    """The number of ranks: the launcher's, or --nproc local ones."""
    joined = launch.launched_by()
    if joined is not None:
        return joined.world_size
    if args.nproc is not None:
        if args.nproc < 1:
            raise UsageError(f"--nproc must be at least 1, got {args.nproc}")
        return args.nproc
    return max(1, torch.cuda.device_count()) if cfg.device_type == "cuda" else 2


def check_memory(max_bytes: int, dtype_bytes: int, local_ranks: int, device_type: str) -> None:
    """Refuse a sweep that cannot fit in host memory before spawning anything."""
    if device_type != "cpu":
        return
    # Buffers in and out, the expected result, and the int64 index used to build check values.
    need = local_ranks * max_bytes * (3 + 8 / dtype_bytes)
    avail = _mem_available()
    if avail and need > avail:
        raise UsageError(f"--max-bytes {human(max_bytes)} on {local_ranks} ranks needs about "
                         f"{human(need)} of memory; this machine has {human(avail)} available")


def _mem_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


@dataclass(frozen=True)
class CommJob:
    options: CommOptions
    run_dir: Path
    argv: tuple[str, ...]


def comm_job(worker: Worker, job: CommJob, progress: Progress) -> None:
    folder = RunFolder(job.run_dir, "comm", list(job.argv)) if worker.is_main else None
    if folder is not None:
        record_hardware(folder)
    run_comm(worker, job.options, progress, folder)
    if folder is not None:
        folder.finish("complete")
        print(f"# results: {job.run_dir}/run.json, {job.run_dir}/comm.csv", flush=True)


def main(args: argparse.Namespace) -> int:
    cfg = resolve(args.backend, args.device, args.timeout)
    opts = options_from(args, cfg)
    n = world_size(args, cfg)
    validate(opts, n)
    if launch.launched_by() is None:
        check_memory(max(opts.sizes), dtype_named(opts.dtype).itemsize, n, cfg.device_type)
    run_dir = Path(args.out) if args.out else default_run_dir("comm")
    if launch.launched_by() is None or launch.launched_by().rank == 0:
        prepare_run_dir(run_dir)
    job = CommJob(opts, run_dir, tuple(sys.argv))
    return launch.run(launch.Job(comm_job, job, cfg, run_dir), n)
