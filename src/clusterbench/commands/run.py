"""`clusterbench run`: the hardware picture, peaks, comm sweep, the numerics canary, SFT with alignment,
verdicts, report.

The stages are a list walked in order on every rank, each one entry: its name, its typed
options and the same per-rank work its own command runs. run's per-hardware defaults are
typed values laid under the user's --comm-args / --train-args (parsed by those commands' own
option parsers), never words added to what the user typed. After the ranks, the run is judged
by rules (the shipped default_rules.yaml, or --rules FILE) and rendered into report.html.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterbench import args as argtypes
from clusterbench.analyse import expected as expected_figures
from clusterbench.analyse.model import fit_model
from clusterbench.analyse.rules import Rule, default_rules, load_rules
from clusterbench.analyse.verdicts import judge, overall
from clusterbench.comm import options as comm_options
from clusterbench.comm.bench import run_comm
from clusterbench.comm.ops import ALL_OPS
from clusterbench.errors import UsageError
from clusterbench.harness import Plan, RankCommand
from clusterbench.hw import stages as hw_stages
from clusterbench.rank import Rank
from clusterbench.results.schema import CommOptions, Expected, Run
from clusterbench.train import job as train_job
from clusterbench.train import options as train_options
from clusterbench.train.bench import run_train
from clusterbench.units import BITS_PER_BYTE

SKIPPABLE = ("comm", "canary", "train")
# What the comm sweep covers, per hardware; unset, --max-bytes on a GPU keeps comm's own cap at free memory.
COMM_DEFAULTS: dict[str, dict[str, Any]] = {"cpu": {"ops": tuple(ALL_OPS), "max_bytes": 16 * 1024**2},
                                            "cuda": {"ops": tuple(ALL_OPS)}}
# --quick: a short sweep; the 100 SFT steps stay, the alignment needs them.
COMM_QUICK: dict[str, Any] = {"ops": ("all_reduce", "all_gather"), "max_bytes": 1024**2, "step_factor": 4.0,
                              "time_budget_s": 0.05}
EXPECTED_BUSBW_METRIC = "comm.all_reduce.busbw_gbps.top"


@dataclass(frozen=True)
class RunOptions:
    quick: bool = False
    skip: tuple[str, ...] = ()
    comm_args: str = ""
    train_args: str = ""
    expect_busbw: float | None = None  # GB/s
    expected: tuple[Path, ...] = ()  # the team's own tables of expected figures (or baselines)
    peak_seconds: float = 0.5
    rules: Path | None = None


@dataclass(frozen=True)
class Stage:
    name: str
    work: Callable[[Rank, Any], None]  # the per-rank work of the command of the same name
    options: Any


@dataclass(frozen=True)
class RunPlan:
    stages: tuple[Stage, ...]
    train: train_job.TrainJob | None  # judged against its reference after the ranks
    rules: tuple[Rule, ...]
    expected: dict[str, Expected] = field(default_factory=dict)  # given on the command line
    tables: tuple[list[expected_figures.System], ...] = ()  # matched against the run's facts at the end
    canary: train_job.TrainJob | None = None
    canary_note: str | None = None  # why there is no canary


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="a one-minute smoke run: a short comm sweep")
    p.add_argument("--skip", action="append", choices=SKIPPABLE, help="leave a stage out (repeatable)")
    p.add_argument("--comm-args", help="options for the comm stage, as for `clusterbench comm`")
    p.add_argument("--train-args", help="options for the train stage, as for `clusterbench train`")
    p.add_argument("--expect-busbw", type=argtypes.real(0.0), metavar="GBPS",
                   help="FAIL when all_reduce busbw (GB/s) at the largest sizes is below 0.9 x this")
    add_expected_argument(p)
    p.add_argument("--peak-seconds", type=argtypes.real(0.0), help="seconds per measured peak (default 0.5)")
    p.add_argument("--rules", type=Path, metavar="YAML",
                   help="the rules that give the verdicts (default: the shipped default_rules.yaml)")


def add_expected_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--expected", action="append", type=Path, metavar="FILE",
                   help="your fleet's expected figures (the form of the shipped expected_figures.yaml, or a "
                        "clusterbench baseline), compared before the shipped table (repeatable)")


class _StageParser(argparse.ArgumentParser):
    """A stage's own options; a bad one is a UsageError naming the stage, not a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def stage_options(add: Callable[[argparse.ArgumentParser], None], record: type, text: str, what: str) -> dict:
    """What the user typed for a stage, parsed by that command's own parser, as `record`'s keywords."""
    parser = _StageParser(prog=what, add_help=False, argument_default=argparse.SUPPRESS)
    add(parser)  # launch options (--nproc, --backend, ...) are run's own: a stage refuses them
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise UsageError(f"{what}: {e}") from None
    return argtypes.given(parser.parse_args(words), record)


def prepare(args: argparse.Namespace, plan: Plan) -> RunPlan:
    opts = RunOptions(**argtypes.given(args, RunOptions))
    rules = load_rules(opts.rules) if opts.rules else default_rules()
    changes = [r.name for r in rules if r.function == "change"]
    if changes:
        raise UsageError(f"--rules {opts.rules}: rule {changes[0]!r} uses function change, which needs a baseline: "
                         "judge the finished run with clusterbench compare RUN --baseline FILE --rules FILE")
    cuda = plan.device_type == "cuda"
    stages = [
        Stage("hardware", hw_stages.hardware, hw_stages.HardwareOptions(pcie_load=cuda)),
        Stage("peaks", hw_stages.measure, hw_stages.PeakOptions(
            dtypes=("bfloat16", "float32") if cuda else ("float32",), seconds=opts.peak_seconds)),
    ]
    if "comm" not in opts.skip:
        given = stage_options(comm_options.add_arguments, CommOptions, opts.comm_args, "--comm-args")
        comm = comm_options.build(given, COMM_QUICK if opts.quick else COMM_DEFAULTS["cuda" if cuda else "cpu"])
        comm_options.validate(comm, plan.world_size, plan.device_type, None if plan.joined else plan.world_size,
                              plan.dist.backend)
        stages.append(Stage("comm", run_comm, comm))
    train = canary = None
    canary_note = None
    if "train" not in opts.skip:
        given = stage_options(train_options.add_arguments, train_options.TrainOptions, opts.train_args,
                              "--train-args")
        train = train_job.build(train_options.build(given), plan.device_type, plan.world_size)
        if "canary" not in opts.skip:
            canary, canary_note = _canary(train, plan)
        if canary is not None:
            stages.append(Stage("canary", run_train, canary))
        stages.append(Stage("train", run_train, train))
    # --expect-busbw is in GB/s; run.json keeps busbw in Gbps.
    expected = {EXPECTED_BUSBW_METRIC: Expected(opts.expect_busbw * BITS_PER_BYTE, "given", "this cluster",
                                                "--expect-busbw")} if opts.expect_busbw else {}
    tables = tuple(expected_figures.tables(list(opts.expected or ())))  # a bad file fails before any rank starts
    return RunPlan(tuple(stages), train, tuple(rules), expected, tables, canary, canary_note)


def _canary(train: train_job.TrainJob, plan: Plan) -> tuple[train_job.TrainJob | None, str | None]:
    """The numerics canary, unless the train stage already is its task; or why it cannot run."""
    if train.reference_label == train_job.CANARY_REFERENCE:
        return None, None
    try:
        return train_job.canary(plan.world_size), None
    except UsageError:
        rows = train_job.CANARY_OPTIONS.global_batch
        return None, (f"the numerics canary is not run: its {rows} rows per step do not split evenly over "
                      f"{plan.world_size} ranks (it runs on 1, 2, 4, 8 or 16)")


def work(rank: Rank, plan: RunPlan) -> None:
    for i, stage in enumerate(plan.stages, 1):
        rank.say(f"\n== [{i}/{len(plan.stages)}] {stage.name}")
        with rank.stage(stage.name):
            stage.work(rank, stage.options)


def conclude(run: Run, plan: RunPlan, run_dir: Path) -> int:
    """Judge the run by its rules, keep the verdicts, write the report, print the summary."""
    from clusterbench.report.html import render_report  # matplotlib: only the concluding process

    if plan.canary_note:
        print(f"# {plan.canary_note}", flush=True)
    for job in (plan.canary, plan.train):
        if job is not None:
            train_job.judge(run, job)
    expected_figures.attach(run, list(plan.tables), plan.expected)
    run.model = fit_model(run)
    run.verdicts = judge(run, list(plan.rules))
    run.verdict = overall(run.verdicts)
    report = render_report(run_dir, run)
    print("\n== verdict")
    for v in run.verdicts:
        print(f"  {v.status:<5} {v.check:<18} {v.detail}")
    if run.verdict is None:
        print(f"\n  nothing judged\n  report: {report}", flush=True)
        raise UsageError("nothing judged: every check was skipped, so there is no verdict; "
                         "run the comm or train stage (drop --skip) or give --rules for what ran")
    fit = "not fit to train as measured" if run.verdict == "FAIL" else "fit to train"
    print(f"\n  {run.verdict}: {fit}\n  report: {report}", flush=True)
    return 1 if run.verdict == "FAIL" else 0


COMMAND = RankCommand(
    "run", "the whole verdict: hardware, peaks, comm, SFT + alignment, report",
    add_arguments, prepare, work, conclude,
)
