"""The three kinds of command, declared without starting anything: a command is its options and its work.

`RankCommand` runs its work on every rank (spawned here, or joined under torchrun, srun or
mpirun), through the harness (clusterbench.runtime.harness, which cli loads only for such a command);
`LocalCommand` measures in this process and keeps a run folder (the hardware picture, peaks);
`ToolCommand` reads and writes files only (report, compare). Declaring one imports no torch, so
a command that only reads run folders starts fast. Adding a command is one module that builds
one of these, and one line in cli.COMMANDS.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterbench import argtypes, publish
from clusterbench.argtypes import add_options, option
from clusterbench.errors import EXIT_OK
from clusterbench.hw.network import check_interface
from clusterbench.results.folder import RunFolder, default_run_dir
from clusterbench.results.run import Run
from clusterbench.runtime.launchers import MAX_WORLD_SIZE
from clusterbench.shape import JobShape
from clusterbench.stages.registry import run_folder
from clusterbench.telemetry.sampler import DEFAULT_HZ, MAX_HZ

# --timeout's range: under a second not even a rank's start fits, and far above a week torch's
# deadlines overflow and fail at once.
TIMEOUT_S = (1.0, 7 * 86400.0)


@dataclass(frozen=True)
class Launch:
    """Where and how the ranks run, each option declared once."""

    nproc: int | None = option(None, "--nproc", type=argtypes.whole(1, MAX_WORLD_SIZE), help="ranks to start",
                               shown="the GPU count, the Ray cluster's with --launcher ray, else 2")
    backend: str = option("auto", "--backend", help="auto, nccl, gloo, mpi or a registered backend name")
    device: str | None = option(None, "--device", help="cpu or cuda", shown="cuda when available")
    timeout: float = option(300.0, "--timeout", type=argtypes.real(TIMEOUT_S[0], strict=False, maximum=TIMEOUT_S[1]),
                            help=f"seconds any collective, and an idle rank's wait for a scope's phase may take "
                                 f"({TIMEOUT_S[0]:g} to {TIMEOUT_S[1]:g})")
    rendezvous_timeout: float | None = option(
        None, "--rendezvous-timeout", metavar="SECONDS",
        type=argtypes.real(TIMEOUT_S[0], strict=False, maximum=TIMEOUT_S[1]),
        help="seconds the launch may take: every rank meeting, and Gloo's group forming; a launch that cannot work "
             "says who and where within it", shown="CLUSTERBENCH_RENDEZVOUS_TIMEOUT, else 60, never above --timeout")
    out: Path | None = None  # add_out_argument: commands that keep a run folder without ranks take it too
    overwrite: bool = False
    master_addr: str | None = option(None, "--master-addr", help="under srun/mpirun: rank 0's host",
                                     shown="MASTER_ADDR, else what the launcher tells")
    master_port: int | None = option(None, "--master-port", type=argtypes.whole(1, 65535),
                                     help="under srun/mpirun: the rendezvous port",
                                     shown="MASTER_PORT, else derived from the job id")
    iface: str | None = option(None, "--iface", help="network interface between hosts, or names as "
                               "NCCL_SOCKET_IFNAME takes them (sets GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME); one this "
                               "host lacks is refused")
    launcher: str = option("local", "--launcher", choices=("local", "ray"),
                           help="local: spawn --nproc ranks here; ray: one Ray actor per rank, placed by Ray")
    ray_address: str | None = option(None, "--ray-address", help="with --launcher ray: the cluster to join",
                                     shown="RAY_ADDRESS, else a new local Ray")
    telemetry_hz: float = option(DEFAULT_HZ, "--telemetry-hz", metavar="HZ",
                                 type=argtypes.real(0.0, strict=False, maximum=MAX_HZ),
                                 help="device telemetry samples per second while the stages run; 0: off")

    def __post_init__(self) -> None:
        # Ray puts ranks on hosts of its choosing: each checks its own (launch.run_rank).
        if self.iface is not None and self.launcher != "ray":
            check_interface(self.iface)


def add_launch_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("launch")
    add_options(g, Launch)
    add_out_argument(g)
    publish.add_arguments(g)


def add_out_argument(p: Any) -> None:
    p.add_argument("--out", type=Path, help="run folder (default runs/<UTC time>-<command>)")
    p.add_argument("--overwrite", action="store_true", help="replace what is in the way: the run an existing --out folder holds, a file an output "
                        "option names (never one of the command's inputs or a run's own files)")


@dataclass(frozen=True)
class _Named:
    """What every command has: its name, the line its help gives, and its own options."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True)
class RankCommand(_Named):
    """A command whose work runs on every rank of a process group."""

    prepare: Callable[[argparse.Namespace, JobShape], Any]  # typed options, resolved and refused for this job
    work: Callable[[Any, Any], None]  # every rank: work(rank, what prepare returned)
    # After the ranks, on the process that owns the run folder: conclude(run, options, run folder)
    # judges the run as rank 0 left it and returns an exit code; the harness saves the run after.
    conclude: Callable[[Run, Any, Path], int] | None = None
    imports: tuple[str, ...] = ()  # heavy modules its ranks import (launch.Job.imports)

    def add(self, p: argparse.ArgumentParser) -> None:
        self.add_arguments(p)
        add_launch_arguments(p)


def _stdout_is_results(options: Any) -> bool:
    return False


@dataclass(frozen=True)
class LocalCommand(_Named):
    """A command that measures in this process and keeps what it found in a run folder."""

    prepare: Callable[[argparse.Namespace], Any]
    work: Callable[[RunFolder, Any], None]
    results_to_stderr: Callable[[Any], bool] = _stdout_is_results  # when stdout is data

    def add(self, p: argparse.ArgumentParser) -> None:
        self.add_arguments(p)
        add_out_argument(p)
        publish.add_arguments(p)

    def main(self, args: argparse.Namespace) -> int:
        from clusterbench.publish.recording import record_of  # the stages' metrics: only once a run is done

        outputs = publish.outputs_of(args)
        options = self.prepare(args)
        folder = run_folder(getattr(args, "out", None) or default_run_dir(self.name))
        folder.claim(getattr(args, "overwrite", False)).begin(self.name, sys.argv)
        try:
            self.work(folder, options)
        except BaseException as e:
            folder.finish_failed(e)
            raise
        folder.finish("complete")
        say = sys.stderr if self.results_to_stderr(options) else sys.stdout
        publish.publish(record_of(folder.run, str(folder.path.absolute())), outputs, say)
        folder.announce(say)
        return EXIT_OK


@dataclass(frozen=True)
class ToolCommand(_Named):
    """A command that reads run folders and other documents, and measures nothing."""

    run: Callable[[argparse.Namespace], int]

    def add(self, p: argparse.ArgumentParser) -> None:
        self.add_arguments(p)

    def main(self, args: argparse.Namespace) -> int:
        return self.run(args)


Command = RankCommand | LocalCommand | ToolCommand
