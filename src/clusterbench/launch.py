"""Start the ranks: spawn N local workers, or join a job a launcher already started.

Local runs use a TCPStore the parent opens on 127.0.0.1 port 0, so the port is free by
construction and parallel runs never collide. The parent watches its workers: when one
dies or stops answering, it ends the rest and names the rank, so nothing hangs.
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import queue
import signal
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist

from clusterbench.dist import DistConfig, Worker, init
from clusterbench.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, RunFailed, UsageError, one_line
from clusterbench.rank import Progress

# After the first rank fails, the others get this long to notice and exit on their own.
GRACE_S = 3.0

JobFn = Callable[[Worker, Any, Progress], None]


@dataclass(frozen=True)
class Job:
    """A picklable description of what every rank runs: fn(worker, payload, progress)."""

    fn: JobFn
    payload: Any
    dist: DistConfig


@dataclass(frozen=True)
class Outcome:
    """How the whole job ended: one exit code and, unless it is 0, one line naming the root cause."""

    code: int
    message: str | None = None


@dataclass(frozen=True)
class LaunchedBy:
    launcher: str
    rank: int
    world_size: int
    local_rank: int


def launched_by() -> LaunchedBy | None:
    """Detect torchrun, srun or mpirun from the variables each one sets."""
    env = os.environ
    for launcher, rank, size, local in (
        ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
        ("srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
        ("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
        ("mpirun", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ):
        if rank in env and size in env:
            try:
                return LaunchedBy(launcher, int(env[rank]), int(env[size]), int(env.get(local, "0")))
            except ValueError:
                raise UsageError(f"{launcher} variables {rank}/{size} are not integers") from None
    return None


def _run_rank(job: Job, worker_args: dict, progress: Progress) -> Outcome:
    """Run the job on this rank and turn every ending into an exit code and one line."""
    warnings.filterwarnings("ignore")
    try:
        worker = init(job.dist, **worker_args)
        job.fn(worker, job.payload, progress)
        return Outcome(EXIT_OK)
    except UsageError as e:
        code, kind, message = EXIT_USAGE, "usage", one_line(e)
    except KeyboardInterrupt:
        code, kind, message = EXIT_INTERRUPTED, "failed", "interrupted"
    except RunFailed as e:
        code, kind, message = EXIT_FAILED, "result", one_line(e)
    except Exception as e:  # noqa: BLE001 - any failure of a rank becomes one line, not a traceback
        code, kind, message = EXIT_FAILED, "failed", one_line(e)
        if os.environ.get("CLUSTERBENCH_DEBUG"):
            traceback.print_exc()
    progress.error(kind, message)
    return Outcome(code, message)


def _spawned(job: Job, rank: int, world_size: int, port: int, channel: Any) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", _loopback_name())
    os.environ["LOCAL_WORLD_SIZE"] = str(world_size)
    store = dist.TCPStore(
        "127.0.0.1", port, world_size, is_master=False,
        timeout=datetime.timedelta(seconds=job.dist.timeout_s),
    )
    args = {"rank": rank, "world_size": world_size, "local_rank": rank, "store": store}
    code = _run_rank(job, args, Progress(rank, channel)).code
    sys.stdout.flush()
    sys.stderr.flush()
    channel.close()
    channel.join_thread()  # the queue's feeder thread must deliver the error before _exit
    # Skip interpreter teardown: a broken process group can block in its destructor.
    os._exit(code)


def _loopback_name() -> str:
    for name in os.listdir("/sys/class/net") if os.path.isdir("/sys/class/net") else []:
        if name.startswith("lo"):
            return name
    return "lo"


def run(job: Job, nproc: int) -> Outcome:
    """Run the job on every rank (spawned here, or this process's rank of a launcher's job)."""
    joined = launched_by()
    if joined is not None:
        return _run_joined(job, joined)
    return _run_local(job, nproc)


def _run_joined(job: Job, me: LaunchedBy) -> Outcome:
    os.environ.setdefault("RANK", str(me.rank))
    os.environ.setdefault("WORLD_SIZE", str(me.world_size))
    if "MASTER_ADDR" not in os.environ and job.dist.backend != "mpi":
        raise UsageError(f"launched by {me.launcher}: set MASTER_ADDR (and MASTER_PORT) to rank 0's host")
    os.environ.setdefault("MASTER_PORT", "29500")
    args = {"rank": me.rank, "world_size": me.world_size, "local_rank": me.local_rank}
    # Under an external launcher there is no supervisor: each rank reports its own ending.
    outcome = _run_rank(job, args, Progress(me.rank))
    if dist.is_initialized() and outcome.code == EXIT_OK:
        dist.destroy_process_group()
    if outcome.message and me.world_size > 1:
        return Outcome(outcome.code, f"rank {me.rank}: {outcome.message}")
    return outcome


@dataclass
class _Watch:
    """What the parent knows about each rank."""

    where: dict[int, str] = field(default_factory=dict)
    errors: dict[int, tuple[str, str]] = field(default_factory=dict)

    def take(self, msg: tuple) -> None:
        kind, rank, text = msg
        if kind == "at":
            self.where[rank] = text
        else:
            self.errors.setdefault(rank, (kind, text))

    def during(self, rank: int) -> str:
        return f" during {self.where[rank]}" if rank in self.where else ""


def _run_local(job: Job, nproc: int) -> Outcome:
    ctx = mp.get_context("spawn")
    channel = ctx.Queue()
    store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False)
    procs = [
        ctx.Process(target=_spawned, args=(job, rank, nproc, store.port, channel), daemon=True)
        for rank in range(nproc)
    ]
    for p in procs:
        p.start()
    watch = _Watch()
    hung: list[int] = []
    try:
        hung = _supervise(procs, channel, watch)
    except KeyboardInterrupt:
        _stop(procs)
        return Outcome(EXIT_INTERRUPTED, "interrupted by the user")
    finally:
        _drain(channel, watch)
    return _outcome(procs, watch, hung, job.dist.timeout_s)


def _supervise(procs: list, channel: Any, watch: _Watch) -> list[int]:
    """Wait for all ranks; after the first failure, give the rest GRACE_S, then end them."""
    deadline = None
    while True:
        _drain(channel, watch, block_s=0.05)
        codes = [p.exitcode for p in procs]
        if all(c is not None for c in codes):
            return []
        if deadline is None and any(c not in (None, 0) for c in codes):
            deadline = time.monotonic() + GRACE_S
        if deadline is not None and time.monotonic() > deadline:
            hung = [r for r, p in enumerate(procs) if p.exitcode is None]
            _stop(procs)
            return hung


def _drain(channel: Any, watch: _Watch, block_s: float = 0.0) -> None:
    try:
        watch.take(channel.get(timeout=block_s) if block_s else channel.get_nowait())
        while True:
            watch.take(channel.get_nowait())
    except (queue.Empty, OSError, ValueError, EOFError):
        pass


def _stop(procs: list) -> None:
    for p in procs:
        if p.exitcode is None:
            p.terminate()
    for p in procs:
        p.join(timeout=5)
        if p.exitcode is None:
            p.kill()
            p.join(timeout=5)


def _outcome(procs: list, watch: _Watch, hung: list[int], timeout_s: float) -> Outcome:
    """One exit code and one line for the whole run, the root cause first."""
    codes = {r: p.exitcode for r, p in enumerate(procs)}
    usage = [r for r, (kind, _) in sorted(watch.errors.items()) if kind == "usage"]
    if usage:
        return Outcome(EXIT_USAGE, watch.errors[usage[0]][1])
    died = [r for r, c in codes.items() if c not in (0, None) and r not in watch.errors and r not in hung]
    if died:
        r = died[0]
        how = f"killed by {signal.Signals(-codes[r]).name}" if codes[r] < 0 else f"exit code {codes[r]}"
        return Outcome(EXIT_FAILED, f"rank {r} died ({how}){watch.during(r)}; the other ranks were stopped")
    if hung:
        r = hung[0]
        return Outcome(EXIT_FAILED, f"rank {r} stopped responding{watch.during(r)}; the other ranks gave up "
                                    f"after the {timeout_s:g} s timeout")
    results = [r for r, (kind, _) in sorted(watch.errors.items()) if kind == "result"]
    if results:
        return Outcome(EXIT_FAILED, watch.errors[results[0]][1])
    failed = sorted(watch.errors)
    if failed:
        r = failed[0]
        return Outcome(EXIT_FAILED, f"rank {r}: {watch.errors[r][1]}")
    return Outcome(EXIT_OK)
