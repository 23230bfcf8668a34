"""One life for every command, as nccl-tests has one harness for every collective.

A command supplies its options and its work; the harness does the rest, the same way for all:

    parse -> launch options -> world size -> prepare (typed options, refused before anything
    starts) -> the run folder -> every rank: join, gather the environment, rank 0 opens the
    folder and records the hardware, the command's work, the folder's status -> the
    conclusion (judged from the finished run.json, read once) -> one exit code

`RankCommand` runs its work on every rank (spawned here, or joined under torchrun, srun or
mpirun); `LocalCommand` runs in this process (the hardware picture, peaks); `ToolCommand`
reads and writes files only (report, compare). Adding a command is one module that builds
one of these, and one line in cli.COMMANDS.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from clusterbench import args as argtypes
from clusterbench import launch, launchers
from clusterbench.dist import DistConfig, Worker, environment, resolve
from clusterbench.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Interrupted, RunFailed, UsageError, one_line
from clusterbench.hw.topology import describe
from clusterbench.launchers import Joined
from clusterbench.rank import Progress, Rank
from clusterbench.results import documents
from clusterbench.results.folder import NCCL_LOGS, RunFolder, claim, default_run_dir, load_run, result_files, save_run
from clusterbench.results.schema import Run
from clusterbench.telemetry import stages as telemetry


@dataclass(frozen=True)
class Launch:
    """Where and how the ranks run."""

    nproc: int | None = None  # None: the GPU count, else 2
    backend: str = "auto"
    device: str | None = None
    timeout: float = 300.0
    out: Path | None = None
    overwrite: bool = False
    master_addr: str | None = None
    master_port: int | None = None
    iface: str | None = None
    launcher: str = "local"
    ray_address: str | None = None
    telemetry_hz: float = telemetry.DEFAULT_HZ


def add_launch_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("launch")
    g.add_argument("--nproc", type=argtypes.whole(1),
                   help="ranks to start (default: the GPU count, the Ray cluster's with --launcher ray, else 2)")
    g.add_argument("--backend", help="auto, nccl, gloo, mpi or a registered backend name (default auto)")
    g.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    g.add_argument("--timeout", type=argtypes.real(0.0),
                   help="seconds the rendezvous, any collective, and an idle rank's wait for a scope's "
                        "phase may take (default 300)")
    g.add_argument("--master-addr", dest="master_addr",
                   help="under srun/mpirun: rank 0's host (default: MASTER_ADDR, else what the launcher tells)")
    g.add_argument("--master-port", dest="master_port", type=argtypes.whole(1, 65535),
                   help="under srun/mpirun: the rendezvous port (default: MASTER_PORT, else derived from the job id)")
    g.add_argument("--iface", help="network interface between hosts (sets GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME)")
    g.add_argument("--launcher", choices=("local", "ray"),
                   help="local: spawn --nproc ranks here (default); ray: one Ray actor per rank, placed by Ray")
    g.add_argument("--ray-address", dest="ray_address",
                   help="with --launcher ray: the cluster to join (default: RAY_ADDRESS, else a new local Ray)")
    g.add_argument("--telemetry-hz", dest="telemetry_hz", metavar="HZ",
                   type=argtypes.real(0.0, strict=False, maximum=telemetry.MAX_HZ),
                   help="device telemetry samples per second while the stages run; 0: off "
                        f"(default {telemetry.DEFAULT_HZ:g})")
    add_out_argument(g)


def add_out_argument(p: Any) -> None:
    p.add_argument("--out", type=Path, help="run folder (default runs/<UTC time>-<command>)")
    p.add_argument("--overwrite", action="store_true", help="replace the run an existing --out folder holds")


@dataclass(frozen=True)
class Plan:
    """What a command's prepare() knows before any rank starts."""

    dist: DistConfig
    world_size: int
    run_dir: Path
    joined: Joined | None
    overwrite: bool = False
    iface: str | None = None
    ray_address: str | None = None
    ray: bool = False
    telemetry_hz: float = telemetry.DEFAULT_HZ

    @property
    def device_type(self) -> str:
        return self.dist.device_type


@dataclass(frozen=True)
class RankCommand:
    """A command whose work runs on every rank of a process group."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    prepare: Callable[[argparse.Namespace, Plan], Any]  # typed options, validated for this plan
    work: Callable[[Rank, Any], None]  # every rank
    # After the ranks, on the process that owns the run folder: conclude(run, options, run folder)
    # judges the run as rank 0 left it and returns an exit code; the harness saves the run after.
    conclude: Callable[[Run, Any, Path], int] | None = None

    def add(self, p: argparse.ArgumentParser) -> None:
        self.add_arguments(p)
        add_launch_arguments(p)

    def main(self, args: argparse.Namespace) -> int:
        return _run_ranks(self, args)


@dataclass(frozen=True)
class LocalCommand:
    """A command that measures in this process and keeps what it found in a run folder."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    prepare: Callable[[argparse.Namespace], Any]
    work: Callable[[RunFolder, Any], None]
    results_to_stderr: Callable[[Any], bool] = field(default=lambda options: False)  # stdout is data

    def add(self, p: argparse.ArgumentParser) -> None:
        self.add_arguments(p)
        add_out_argument(p)

    def main(self, args: argparse.Namespace) -> int:
        options = self.prepare(args)
        out = claim(getattr(args, "out", None) or default_run_dir(self.name), getattr(args, "overwrite", False))
        folder = RunFolder(out, self.name, sys.argv)
        try:
            self.work(folder, options)
        except BaseException as e:
            _finish_failed(folder, e)
            raise
        folder.finish("complete")
        _print_results(folder.path, sys.stderr if self.results_to_stderr(options) else sys.stdout)
        return EXIT_OK


@dataclass(frozen=True)
class ToolCommand:
    """A command that reads run folders and other documents, and measures nothing."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]

    def add(self, p: argparse.ArgumentParser) -> None:
        self.add_arguments(p)

    def main(self, args: argparse.Namespace) -> int:
        return self.run(args)


Command = RankCommand | LocalCommand | ToolCommand


@dataclass(frozen=True)
class _RankJob:
    """What every rank receives (pickled to spawned ranks)."""

    command: str
    work: Callable[[Rank, Any], None]
    options: Any
    run_dir: Path
    argv: tuple[str, ...]
    telemetry_hz: float


def _rank_main(worker: Worker, job: _RankJob, progress: Progress) -> None:
    env = environment(worker)  # a collective: every rank takes part
    folder = RunFolder(job.run_dir, job.command, list(job.argv)) if worker.rank == 0 else None
    if folder is not None:
        folder.record(env=env, hardware=describe())  # NVML and /sys only: starts no CUDA context
    recorder = None
    try:
        recorder = telemetry.start(worker, folder, job.telemetry_hz)
        rank = Rank(worker, progress, env, folder, recorder)
        with rank.stage(job.command):  # a command that walks stages marks its own inside this one
            job.work(rank, job.options)
    except BaseException as e:
        if folder is not None:
            _finish_failed(folder, e)
        raise
    finally:
        if recorder is not None:
            recorder.close()
    if folder is not None:
        folder.finish("complete")


def _finish_failed(folder: RunFolder, e: BaseException) -> None:
    """Record how the work ended, if the disk still lets us: the first error is the one reported."""
    try:
        folder.finish("interrupted" if isinstance(e, KeyboardInterrupt) else "failed", one_line(e))
    except RunFailed:
        pass


def world_size(options: Launch, cfg: DistConfig, joined: Joined | None) -> int:
    """The number of ranks: the launcher's, or --nproc local ones."""
    if joined is not None:
        if options.nproc not in (None, joined.world_size):
            raise UsageError(f"--nproc {options.nproc}: {joined.launcher} started this job with "
                             f"{joined.world_size} ranks; drop --nproc under a launcher")
        return joined.world_size
    if options.nproc is not None:
        return options.nproc
    if options.launcher == "ray":
        from clusterbench import ray_launch  # only Ray users need ray installed

        return ray_launch.default_world_size(options.ray_address, cfg.device_type)
    return max(1, torch.cuda.device_count()) if cfg.device_type == "cuda" else 2


def plan_for(args: argparse.Namespace, command: str) -> Plan:
    options = Launch(**argtypes.given(args, Launch))
    cfg = resolve(options.backend, options.device, options.timeout)
    joined = _joined(options)
    if options.launcher == "ray" and joined is not None:
        raise UsageError(f"--launcher ray starts the ranks itself, but {joined.launcher} already started this "
                         "process as one rank: run it once, outside the launcher")
    return Plan(cfg, world_size(options, cfg, joined), options.out or default_run_dir(command), joined,
                options.overwrite, options.iface, options.ray_address, options.launcher == "ray", options.telemetry_hz)


def _joined(options: Launch) -> Joined | None:
    """The launcher's job this process is a rank of, with --master-addr/--master-port applied."""
    joined = launchers.detect()
    if joined is None:
        return None
    joined = replace(joined, master_addr=options.master_addr or joined.master_addr,
                     master_port=options.master_port or joined.master_port)
    if joined.master_addr is None:
        raise UsageError(f"launched by {joined.launcher}: cannot tell rank 0's host; "
                         "set MASTER_ADDR or --master-addr")
    if joined.master_port is None:
        raise UsageError(f"launched by {joined.launcher}: no port to meet on; set MASTER_PORT or --master-port")
    return joined


def _run_ranks(cmd: RankCommand, args: argparse.Namespace) -> int:
    plan = plan_for(args, cmd.name)
    options = cmd.prepare(args, plan)
    owner = plan.joined is None or plan.joined.rank == 0  # writes the run folder and concludes
    if owner:
        claim(plan.run_dir, plan.overwrite)
    job = _RankJob(cmd.name, cmd.work, options, plan.run_dir, tuple(sys.argv), plan.telemetry_hz)
    nccl_logs = plan.run_dir / NCCL_LOGS if plan.dist.backend == "nccl" else None
    work = launch.Job(_rank_main, job, plan.dist, plan.iface, nccl_logs)
    if plan.ray:
        from clusterbench import ray_launch  # only Ray users need ray installed

        outcome = ray_launch.run(work, plan.world_size, plan.ray_address)
    else:
        outcome = launch.run(work, plan.world_size, plan.joined)
    if not owner:
        if outcome.code == EXIT_USAGE:
            return outcome.code  # rank 0 says it once
        _raise(outcome, plan.run_dir)
        return outcome.code
    run = _finished_run(plan.run_dir, outcome)
    code, late = outcome.code, None
    if run is not None:
        try:
            if cmd.conclude is not None:
                code = max(code, cmd.conclude(run, options, plan.run_dir))
        except RunFailed as e:
            late = e
            if run.status == "complete":
                run.status, run.error = "failed", one_line(e)
        finally:  # whatever the conclusion found is kept, even when it ends in an error
            try:
                save_run(plan.run_dir, run)
            except RunFailed as e:
                late = late or e
    _raise(outcome, plan.run_dir)
    if late is not None:
        raise late
    _print_results(plan.run_dir, sys.stdout)
    return code


def _finished_run(run_dir: Path, outcome: launch.Outcome) -> Run | None:
    """The run as rank 0 left it, read once, with the job's ending: the supervisor knows the
    root cause (a rank that died) better than rank 0, which may only have seen its peer vanish."""
    if not (run_dir / "run.json").exists():
        return None
    try:
        run = load_run(run_dir)
    except UsageError:
        return None
    if outcome.code != EXIT_OK:
        run.status = "interrupted" if outcome.code == EXIT_INTERRUPTED else "failed"
        run.error, run.finished_utc = outcome.message, run.finished_utc or documents.utc_stamp()
    logs = sorted((run_dir / NCCL_LOGS).glob("*.log"))
    if logs:
        from clusterbench.nccl.log import parse_files

        run.nccl = parse_files(logs)
    return run


def _raise(outcome: launch.Outcome, run_dir: Path) -> None:
    if outcome.code == EXIT_OK:
        return
    if outcome.code == EXIT_USAGE:
        raise UsageError(outcome.message)
    if outcome.code == EXIT_INTERRUPTED:
        raise Interrupted(f"interrupted; what was measured so far is in {run_dir}")
    raise RunFailed(outcome.message)


def _print_results(run_dir: Path, stream: Any) -> None:
    print(f"# results: {', '.join(str(f) for f in result_files(run_dir) if f.exists())}", file=stream, flush=True)
