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
from pathlib import Path
from typing import Any

import torch.distributed as dist

from clusterbench.dist import DistConfig, Worker, init
from clusterbench.errors import RunFailed, UsageError
from clusterbench.results import mark_finished

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
# After the first rank fails, the others get this long to notice and exit on their own.
GRACE_S = 3.0


class Progress:
    """Where a rank is, so the parent can say what a dead or stuck rank was doing."""

    def __init__(self, rank: int, channel: Any = None) -> None:
        self.rank = rank
        self._channel = channel

    def at(self, where: str) -> None:
        if self._channel is not None:
            self._channel.put(("at", self.rank, where))

    def error(self, kind: str, message: str) -> None:
        if self._channel is not None:
            self._channel.put((kind, self.rank, message))


JobFn = Callable[[Worker, Any, Progress], None]


@dataclass(frozen=True)
class Job:
    """A picklable description of what every rank runs: fn(worker, payload, progress)."""

    fn: JobFn
    payload: Any
    dist: DistConfig
    run_dir: Path


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


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if not isinstance(exc, (UsageError, RunFailed)) else first


def _run_rank(job: Job, worker_args: dict, progress: Progress, owns_status: bool) -> int:
    """Run the job on this rank and turn every outcome into an exit code."""
    warnings.filterwarnings("ignore")
    try:
        worker = init(job.dist, **worker_args)
        job.fn(worker, job.payload, progress)
        return EXIT_OK
    except UsageError as e:
        code, kind, message = EXIT_USAGE, "usage", _one_line(e)
    except KeyboardInterrupt:
        code, kind, message = EXIT_INTERRUPTED, "failed", "interrupted"
    except RunFailed as e:
        code, kind, message = EXIT_FAILED, "result", _one_line(e)
    except Exception as e:  # noqa: BLE001 - any failure of a rank becomes one line, not a traceback
        code, kind, message = EXIT_FAILED, "failed", _one_line(e)
        if os.environ.get("CLUSTERBENCH_DEBUG"):
            traceback.print_exc()
    progress.error(kind, message)
    if owns_status and progress.rank == 0:
        mark_finished(job.run_dir, "interrupted" if code == EXIT_INTERRUPTED else "failed", message)
    return code


def _spawned(job: Job, rank: int, world_size: int, port: int, channel: Any) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", _loopback_name())
    os.environ["LOCAL_WORLD_SIZE"] = str(world_size)
    store = dist.TCPStore(
        "127.0.0.1", port, world_size, is_master=False,
        timeout=datetime.timedelta(seconds=job.dist.timeout_s),
    )
    args = {"rank": rank, "world_size": world_size, "local_rank": rank, "store": store}
    code = _run_rank(job, args, Progress(rank, channel), owns_status=False)
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


def run(job: Job, nproc: int) -> int:
    """Run the job on every rank and return the exit code for the whole run."""
    joined = launched_by()
    if joined is not None:
        return _run_joined(job, joined)
    return _run_local(job, nproc)


def _run_joined(job: Job, me: LaunchedBy) -> int:
    os.environ.setdefault("RANK", str(me.rank))
    os.environ.setdefault("WORLD_SIZE", str(me.world_size))
    if "MASTER_ADDR" not in os.environ and job.dist.backend != "mpi":
        raise UsageError(f"launched by {me.launcher}: set MASTER_ADDR (and MASTER_PORT) to rank 0's host")
    os.environ.setdefault("MASTER_PORT", "29500")
    args = {"rank": me.rank, "world_size": me.world_size, "local_rank": me.local_rank}
    progress = _PrintingProgress(me.rank)
    code = _run_rank(job, args, progress, owns_status=True)
    if dist.is_initialized() and code == EXIT_OK:
        dist.destroy_process_group()
    return code


class _PrintingProgress(Progress):
    """Under an external launcher there is no parent to tell: each rank prints its own error."""

    def error(self, kind: str, message: str) -> None:
        if kind != "usage" or self.rank == 0:
            print(f"clusterbench: error: rank {self.rank}: {message}", file=sys.stderr, flush=True)


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


def _run_local(job: Job, nproc: int) -> int:
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
        mark_finished(job.run_dir, "interrupted", "interrupted by the user")
        raise RunFailedInterrupted(f"interrupted; the rows measured so far are in {job.run_dir}") from None
    finally:
        _drain(channel, watch)
    code, message = _verdict(procs, watch, hung, job.dist.timeout_s)
    if message is not None:
        mark_finished(job.run_dir, "failed", message)
        if code == EXIT_USAGE:
            raise UsageError(message)
        raise RunFailed(message)
    return code


class RunFailedInterrupted(RunFailed):
    """Ctrl-C: the CLI exits 130."""


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


def _verdict(procs: list, watch: _Watch, hung: list[int], timeout_s: float) -> tuple[int, str | None]:
    """One exit code and one line for the whole run, the root cause first."""
    codes = {r: p.exitcode for r, p in enumerate(procs)}
    usage = [r for r, (kind, _) in sorted(watch.errors.items()) if kind == "usage"]
    if usage:
        return EXIT_USAGE, watch.errors[usage[0]][1]
    died = [r for r, c in codes.items() if c not in (0, None) and r not in watch.errors and r not in hung]
    if died:
        r = died[0]
        how = f"killed by {signal.Signals(-codes[r]).name}" if codes[r] < 0 else f"exit code {codes[r]}"
        return EXIT_FAILED, f"rank {r} died ({how}){watch.during(r)}; the other ranks were stopped"
    if hung:
        r = hung[0]
        return EXIT_FAILED, (
            f"rank {r} stopped responding{watch.during(r)}; the other ranks gave up "
            f"after the {timeout_s:g} s timeout"
        )
    results = [r for r, (kind, _) in sorted(watch.errors.items()) if kind == "result"]
    if results:
        return EXIT_FAILED, watch.errors[results[0]][1]
    failed = sorted(watch.errors)
    if failed:
        r = failed[0]
        return EXIT_FAILED, f"rank {r}: {watch.errors[r][1]}"
    return EXIT_OK, None
