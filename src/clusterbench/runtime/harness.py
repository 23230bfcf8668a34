"""One life for every rank command, as nccl-tests has one harness for every collective.

A command supplies its options and its work (clusterbench.runtime.command); the harness does the rest,
the same way for all:

    parse -> launch options -> world size -> prepare (typed options, resolved and refused before
    anything starts) -> the run folder -> every rank: join, gather the environment, rank 0 opens
    the folder and records the hardware, the command's work, the folder's status -> the
    conclusion (judged from the finished run.json, read once) -> one exit code
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from clusterbench import argtypes, publish
from clusterbench.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Interrupted, RunFailed, UsageError, one_line
from clusterbench.hw.topology import describe
from clusterbench.nccl.records import NCCL
from clusterbench.publish.recording import record_of
from clusterbench.results import documents
from clusterbench.results.folder import FLIGHT_DUMPS, NCCL_LOGS, RunFolder, default_run_dir
from clusterbench.results.run import Lost, Run, Section
from clusterbench.runtime import launch, launchers
from clusterbench.runtime.command import Launch, RankCommand
from clusterbench.runtime.dist import DistConfig, Worker, resolve
from clusterbench.runtime.environment import environment
from clusterbench.runtime.launchers import Joined
from clusterbench.runtime.rank import Progress, Rank
from clusterbench.runtime.rendezvous import RESOLVE_S, check_address
from clusterbench.shape import JobShape
from clusterbench.stages.registry import run_folder
from clusterbench.telemetry import recorder
from clusterbench.telemetry.sampler import DEFAULT_HZ


@dataclass(frozen=True)
class Setup:
    """Where the ranks run and where their results go, decided before any rank starts."""

    dist: DistConfig
    world_size: int
    run_dir: Path
    joined: Joined | None
    overwrite: bool = False
    iface: str | None = None
    ray_address: str | None = None
    ray: bool = False
    telemetry_hz: float = DEFAULT_HZ

    @property
    def shape(self) -> JobShape:
        """What a command's prepare() resolves its options for: a launcher's job is checked per host."""
        return JobShape(self.world_size, self.dist.device_type, self.dist.backend,
                        None if self.joined else self.world_size)


@dataclass(frozen=True)
class _RankJob:
    """What every rank receives (pickled to spawned ranks)."""

    command: str
    work: Callable[[Rank, Any], None]
    options: Any
    run_dir: Path
    argv: tuple[str, ...]
    telemetry_hz: float
    sections: dict[str, Section[Any]]  # run.json's, as the process that started the ranks knows them


def _rank_main(worker: Worker, job: _RankJob, progress: Progress) -> None:
    env = environment(worker)  # a collective: every rank takes part
    folder = RunFolder(job.run_dir, job.sections).begin(job.command, list(job.argv)) if worker.rank == 0 else None
    if folder is not None:
        folder.record(env=env, hardware=describe())  # NVML and /sys only: starts no CUDA context
    telemetry = None
    try:
        telemetry = recorder.start(worker, folder, job.telemetry_hz)
        rank = Rank(worker, progress, env, folder, telemetry)
        with rank.stage(job.command):  # a command that walks stages marks its own inside this one
            job.work(rank, job.options)
    except BaseException as e:
        if folder is not None:
            folder.finish_failed(e)
        raise
    finally:
        if telemetry is not None:
            telemetry.close()
    if folder is not None:
        folder.finish("complete")


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
        from clusterbench.runtime import ray_launch  # only Ray users need ray installed

        return ray_launch.default_world_size(options.ray_address, cfg.device_type)
    return max(1, torch.cuda.device_count()) if cfg.device_type == "cuda" else 2


def setup_for(args: argparse.Namespace, command: str) -> Setup:
    options = Launch(**argtypes.given(args, Launch))
    cfg = resolve(options.backend, options.device, options.timeout, options.rendezvous_timeout)
    joined = _joined(options, cfg.rendezvous_s)
    if options.launcher == "ray" and joined is not None:
        raise UsageError(f"--launcher ray starts the ranks itself, but {joined.launcher} already started this "
                         "process as one rank: run it once, outside the launcher")
    return Setup(cfg, world_size(options, cfg, joined), options.out or default_run_dir(command), joined,
                options.overwrite, options.iface, options.ray_address, options.launcher == "ray", options.telemetry_hz)


def _joined(options: Launch, rendezvous_s: float) -> Joined | None:
    """The launcher's job this process is a rank of, with --master-addr/--master-port applied."""
    joined = launchers.detect()
    if joined is None:
        return None
    joined = replace(joined, master_addr=options.master_addr or joined.master_addr,
                     master_port=options.master_port or joined.master_port)
    if joined.master_addr is None:
        raise UsageError(f"launched by {joined.launcher}: cannot tell rank 0's host; "
                         "set MASTER_ADDR or --master-addr")
    # before rank 0 claims (or, with --overwrite, empties) the run folder
    check_address(joined.master_addr, min(RESOLVE_S, rendezvous_s))
    if joined.master_port is None:
        raise UsageError(f"launched by {joined.launcher}: no port to meet on; set MASTER_PORT or --master-port")
    return joined


def run_ranks(cmd: RankCommand, args: argparse.Namespace) -> int:
    setup = setup_for(args, cmd.name)
    outputs = publish.outputs_of(args)
    options = cmd.prepare(args, setup.shape)
    owner = setup.joined is None or setup.joined.rank == 0  # writes the run folder and concludes
    folder = run_folder(setup.run_dir)
    if owner:
        folder.claim(setup.overwrite)
    job = _RankJob(cmd.name, cmd.work, options, setup.run_dir, tuple(sys.argv), setup.telemetry_hz, folder.sections)
    nccl_logs = setup.run_dir / NCCL_LOGS if setup.dist.backend == "nccl" else None
    work = launch.Job(_rank_main, job, setup.dist, setup.iface, nccl_logs, setup.run_dir / FLIGHT_DUMPS,
                      (cmd.work.__module__, *cmd.imports))
    if setup.ray:
        from clusterbench.runtime import ray_launch  # only Ray users need ray installed

        outcome = ray_launch.run(work, setup.world_size, setup.ray_address)
    else:
        outcome = launch.run(work, setup.world_size, setup.joined)
    if not owner:
        if outcome.code == EXIT_USAGE:
            return outcome.code  # rank 0 says it once
        _raise(outcome, setup.run_dir)
        return outcome.code
    run = _finished_run(folder, outcome)
    code, late = outcome.code, None
    if run is not None:
        try:
            if cmd.conclude is not None:
                code = max(code, cmd.conclude(run, options, setup.run_dir))
        except RunFailed as e:
            late = e
            if run.status == "complete":
                run.status, run.error = "failed", one_line(e)
        finally:  # whatever the conclusion found is kept, even when it ends in an error
            try:
                folder.save(run)
            except RunFailed as e:
                late = late or e
        publish.publish(record_of(run, str(setup.run_dir.absolute())), outputs)
    _raise(outcome, setup.run_dir)
    if late is not None:
        raise late
    folder.announce(sys.stdout)
    return code


def _finished_run(folder: RunFolder, outcome: launch.Outcome) -> Run | None:
    """The run as rank 0 left it, read once, with the job's ending: the supervisor knows the
    root cause (a rank that died) better than rank 0, which may only have seen its peer vanish."""
    run_dir = folder.path
    if not folder.json_path.exists():
        return None
    try:
        run = folder.load()
    except UsageError:
        return None
    if outcome.code != EXIT_OK:
        run.status = "interrupted" if outcome.code == EXIT_INTERRUPTED else "failed"
        run.error, run.finished_utc = outcome.message, run.finished_utc or documents.utc_stamp()
        nodes = {p.rank: p.node for p in run.env.ranks}
        run.lost = [Lost(rank, nodes.get(rank, "?"), during) for rank, during in outcome.lost]
    from clusterbench.nccl.jobs import read_folder

    try:
        NCCL.set(run, read_folder(run_dir / NCCL_LOGS, own=True)[0] or NCCL.of(run))
    except UsageError:  # a log it cannot read, or unrelated jobs': `diagnose RUN_DIR` reads them again and says why
        pass
    return run


def _raise(outcome: launch.Outcome, run_dir: Path) -> None:
    if outcome.code == EXIT_OK:
        return
    if outcome.code == EXIT_USAGE:
        raise UsageError(outcome.message)
    if outcome.code == EXIT_INTERRUPTED:
        raise Interrupted(f"interrupted; what was measured so far is in {run_dir}")
    raise RunFailed(outcome.message)
