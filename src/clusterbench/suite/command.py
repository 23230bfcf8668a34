"""`clusterbench run`: the hardware picture, peaks, comm sweep, SFT with alignment, verdicts, report.

The stages are the sub-commands' own code (record_hardware, measure_device, run_comm,
run_train) run in one set of ranks, writing one run folder. Every sub-command option stays
reachable through --comm-args / --train-args, parsed by the sub-commands' own parsers.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch.distributed as dist

from clusterbench import launch
from clusterbench.comm import command as comm_command
from clusterbench.comm.bench import CommOptions, run_comm
from clusterbench.dist import DistConfig, Worker, resolve
from clusterbench.errors import RunFailed, UsageError
from clusterbench.hw.command import record_hardware
from clusterbench.hw.peak_command import HEADER, measure_device, peaks_doc
from clusterbench.hw.topology import render
from clusterbench.launch import Progress
from clusterbench.results import RunFolder, default_run_dir, load_run, mark_finished, prepare_run_dir, update_run
from clusterbench.suite.verdicts import judge, overall
from clusterbench.train import command as train_command
from clusterbench.train.command import TrainJob, run_train

STAGES = ("comm", "train")
# Per hardware: what the sweep covers. --quick keeps the 100 SFT steps (the alignment needs them).
COMM_DEFAULTS = {"cpu": ["--ops", "all", "-e", "16M"], "cuda": ["--ops", "all", "-e", "1G"]}
COMM_QUICK = ["--ops", "all_reduce,all_gather", "-e", "1M", "-f", "4", "--time-budget", "0.05"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="a one-minute smoke run: a short comm sweep")
    p.add_argument("--skip", action="append", default=[], choices=STAGES, help="leave a stage out (repeatable)")
    p.add_argument("--comm-args", default="", help="options for the comm stage, as for `clusterbench comm`")
    p.add_argument("--train-args", default="", help="options for the train stage, as for `clusterbench train`")
    p.add_argument("--expect-busbw", type=float, default=None, metavar="GBPS",
                   help="FAIL when all_reduce busbw (GB/s) at the largest sizes is below 0.9 x this")
    p.add_argument("--peak-seconds", type=float, default=0.5, help="seconds per measured peak (default 0.5)")


class _StageParser(argparse.ArgumentParser):
    """A stage's own options; a bad one is a UsageError naming the stage, not a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def _sub_args(add: Callable[[argparse.ArgumentParser], None], defaults: list[str], text: str,
              what: str) -> argparse.Namespace:
    """Parse a stage's options with that sub-command's own parser; the user's words win."""
    parser = _StageParser(prog=what, add_help=False)
    add(parser)  # launch options (--nproc, --backend, ...) are run's own: a stage refuses them
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise UsageError(f"{what}: {e}") from None
    return parser.parse_args(defaults + words)


@dataclass(frozen=True)
class Suite:
    comm: CommOptions | None
    train: TrainJob | None
    peak_dtypes: tuple[str, ...]
    peak_seconds: float
    run_dir: Path
    argv: tuple[str, ...]


def suite_job(worker: Worker, suite: Suite, progress: Progress) -> None:
    """Every rank: each stage in turn into one run folder; rank 0 prints and records."""
    folder = RunFolder(suite.run_dir, "run", list(suite.argv)) if worker.is_main else None
    say = (lambda text: print(text, flush=True)) if worker.is_main else (lambda text: None)
    stages = 2 + (suite.comm is not None) + (suite.train is not None)
    stage = iter(range(1, stages + 1))
    say(f"\n== [{next(stage)}/{stages}] hardware")
    if folder is not None:
        # Idle GPUs park their PCIe links: read them while the GPUs copy, or the check means nothing.
        say(render(record_hardware(folder, pcie_load=worker.device.type == "cuda")))
    say(f"\n== [{next(stage)}/{stages}] peaks: torch.mm n x n and copy, per device")
    progress.at("measuring peaks")
    say(HEADER)
    # One CPU is one device however many ranks share it; each GPU is measured by its own rank.
    mine = measure_device(str(worker.device), list(suite.peak_dtypes), None, suite.peak_seconds) \
        if worker.device.type != "cpu" or worker.rank == 0 else None
    everyone: list = [None] * worker.world_size
    dist.all_gather_object(everyone, mine)
    if folder is not None:
        folder.set("peaks", peaks_doc([e for e in everyone if e]))
    if suite.comm is not None:
        say(f"\n== [{next(stage)}/{stages}] comm")
        try:
            run_comm(worker, suite.comm, progress, folder)
        except RunFailed as e:
            say(f"# {e}")  # wrong values are a verdict, not a reason to skip training
    if suite.train is not None:
        say(f"\n== [{next(stage)}/{stages}] train")
        run_train(worker, suite.train, progress, folder)
    if folder is not None:
        folder.flush()


def main(args: argparse.Namespace) -> int:
    cfg = resolve(args.backend, args.device, args.timeout)
    n = comm_command.world_size(args, cfg)
    run_dir = Path(args.out) if args.out else default_run_dir("run")
    joined = launch.launched_by()
    concludes = joined is None or joined.rank == 0  # the process that judges and writes the report
    if concludes:
        prepare_run_dir(run_dir)
    suite = Suite(
        comm=None if "comm" in args.skip else _comm_options(args, cfg, n),
        train=None if "train" in args.skip else _train_job(args, cfg, n, run_dir),
        peak_dtypes=("bfloat16", "float32") if cfg.device_type == "cuda" else ("float32",),
        peak_seconds=args.peak_seconds, run_dir=run_dir, argv=tuple(sys.argv),
    )
    try:
        code = launch.run(launch.Job(suite_job, suite, cfg, run_dir), n)
    except (RunFailed, UsageError):
        if concludes and (run_dir / "run.json").exists():
            _conclude(run_dir, args.expect_busbw)  # the report still shows what was measured
        raise
    if not concludes:
        return code
    return max(code, _conclude(run_dir, args.expect_busbw))


def _comm_options(args: argparse.Namespace, cfg: DistConfig, n: int) -> CommOptions:
    defaults = COMM_QUICK if args.quick else COMM_DEFAULTS["cuda" if cfg.device_type == "cuda" else "cpu"]
    sub = _sub_args(comm_command.add_arguments, defaults, args.comm_args, "--comm-args")
    opts = comm_command.options_from(sub, cfg)
    comm_command.validate(opts, n)
    return opts


def _train_job(args: argparse.Namespace, cfg: DistConfig, n: int, run_dir: Path) -> TrainJob:
    sub = _sub_args(train_command.add_arguments, [], args.train_args, "--train-args")
    sub.out = str(run_dir)  # build_job reads the one launch option it needs
    return train_command.build_job(sub, cfg, n)


def _conclude(run_dir: Path, expect_busbw: float | None) -> int:
    """Judge run.json, store the verdicts, write the report, print the summary."""
    from clusterbench.report.html import render_report  # matplotlib: only the concluding process

    mark_finished(run_dir, "complete", None)
    doc = load_run(run_dir)
    checks = judge(doc, expect_busbw)
    verdict = overall(checks)
    update_run(run_dir, verdicts=checks, verdict=verdict)
    report = render_report(run_dir)
    print("\n== verdict")
    for c in checks:
        print(f"  {c['status']:<5} {c['check']:<18} {c['detail']}")
    print(f"\n  {verdict}: {'not fit to train as measured' if verdict == 'FAIL' else 'fit to train'}"
          f"\n  report: {report}\n  data:   {run_dir}/run.json", flush=True)
    return 1 if verdict == "FAIL" else 0
