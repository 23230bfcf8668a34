"""`clusterbench run`: every stage of the registry in order (the hardware picture, peaks, comm
sweep, numerics canary, SFT with alignment), then verdicts by rules and the report.

Each stage is one entry of clusterbench.stages.registry: its typed options, resolved once before any
rank starts, the same per-rank work its own command runs. A stage's options are reachable as
--STAGE.OPTION (--comm.ops all_reduce, --train.preset llama-1b) or, for a stage that is also a
command, in one string (--comm-args "--ops all_reduce"), parsed by that command's own parser.
run's per-hardware defaults are typed values laid under what the user typed, never words added
to it. After the ranks, the run is judged by rules (the shipped ones, registry.default_rules, or
--rules FILE) and rendered into report.html.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from clusterbench import argtypes
from clusterbench.analyse.expected import System, attach, tables
from clusterbench.analyse.rules import Rule, load_rules
from clusterbench.analyse.verdicts import judge, overall
from clusterbench.errors import UsageError
from clusterbench.results.run import Expected, Run
from clusterbench.runtime.command import RankCommand
from clusterbench.shape import JobShape
from clusterbench.stages import registry
from clusterbench.stages.peaks.stage import RUN_SECONDS
from clusterbench.stages.stage import Context, NotRun, Stage
from clusterbench.units import BITS_PER_BYTE

EXPECTED_BUSBW_METRIC = "comm.all_reduce.busbw_gbps.top"


@dataclass(frozen=True)
class RunOptions:
    quick: bool = False
    skip: tuple[str, ...] = ()
    expect_busbw: float | None = None  # GB/s
    expected: tuple[Path, ...] = ()  # the team's own tables of expected figures (or baselines)
    rules: Path | None = None


@dataclass(frozen=True)
class RunPlan:
    stages: tuple[tuple[Stage, Any], ...]  # each stage that runs, with its resolved plan
    rules: tuple[Rule, ...]
    expected: dict[str, Expected] = field(default_factory=dict)  # given on the command line
    tables: tuple[list[System], ...] = ()  # matched against the run's facts at the end
    notes: tuple[str, ...] = ()  # why a stage left itself out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="a one-minute smoke run: a short comm sweep")
    p.add_argument("--skip", action="append", choices=[s.name for s in registry.STAGES if s.optional],
                   help="leave a stage out (repeatable)")
    for stage in registry.STAGES:
        if stage.command:
            p.add_argument(f"--{stage.name}-args", dest=f"{stage.name}_args", metavar="ARGS",
                           help=f"options for the {stage.name} stage in one string, as for `clusterbench {stage.name}`")
    p.add_argument("--expect-busbw", type=argtypes.real(0.0), metavar="GBPS",
                   help="FAIL when all_reduce busbw (GB/s) at the largest sizes is below 0.9 x this")
    add_expected_argument(p)
    p.add_argument("--peak-seconds", dest="peaks.seconds", type=argtypes.real(0.0), metavar="SECONDS",
                   help=f"seconds per measured peak (default {RUN_SECONDS:g}; the same as --peaks.seconds)")
    p.add_argument("--rules", type=Path, metavar="YAML",
                   help="the rules that give the verdicts "
                        "(default: the shipped default_rules.yaml and each stage's rules.yaml)")
    for stage in registry.STAGES:
        if not fields(stage.options):
            continue
        where = f" as `clusterbench {stage.name}` takes them;" if stage.command else ""
        group = p.add_argument_group(f"{stage.name} stage", f"the {stage.name} stage's options,{where} run lays its "
                                                            "own defaults for this hardware under what is given")
        stage.add_arguments(argtypes.Prefixed(group, stage.name))


def add_expected_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--expected", action="append", type=Path, metavar="FILE",
                   help="your fleet's expected figures (the form of the shipped expected_figures.yaml, or a "
                        "clusterbench baseline), compared before the shipped table (repeatable)")


class _StageParser(argparse.ArgumentParser):
    """A stage's own options; a bad one is a UsageError naming the stage, not a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def typed_options(stage: Stage, args: argparse.Namespace) -> dict[str, Any]:
    """What the user typed for a stage, as keywords of its options: --STAGE.OPTION, and --STAGE-args
    parsed by the stage's own parser (launch options such as --nproc are run's own, refused there)."""
    direct = argtypes.prefixed(args, stage.name)
    text = getattr(args, f"{stage.name}_args", None)
    if not text:
        return direct
    what = f"--{stage.name}-args"
    parser = _StageParser(prog=what, add_help=False, argument_default=argparse.SUPPRESS)
    stage.add_arguments(parser)
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise UsageError(f"{what}: {e}") from None
    in_text = argtypes.given(parser.parse_args(words), stage.options)
    both = sorted(direct.keys() & in_text.keys())
    if both:
        raise UsageError(f"{what} and --{stage.name}.{both[0].replace('_', '-')} both set {both[0]}: give it once")
    return {**in_text, **direct}


class _Resolver:
    """Each stage's plan, resolved once and on demand, so a stage may build on another's (the canary on
    the train stage's): a stage that is skipped, or leaves itself out, has none."""

    def __init__(self, args: argparse.Namespace, shape: JobShape, opts: RunOptions) -> None:
        self.args, self.shape, self.opts = args, shape, opts
        self.plans: dict[str, Any] = {}
        self.notes: list[str] = []
        self._resolving: set[str] = set()

    def plan_of(self, name: str) -> Any:
        if name not in self.plans:
            stage = next((s for s in registry.STAGES if s.name == name and s.name not in self.opts.skip), None)
            if name in self._resolving:
                raise UsageError(f"stage {name} needs its own plan to resolve")
            self._resolving.add(name)
            self.plans[name] = None if stage is None else self._resolve(stage)
        return self.plans[name]

    def _resolve(self, stage: Stage) -> Any:
        typed = typed_options(stage, self.args)
        options = replace(stage.options(), **{**stage.run_defaults(self.shape, self.opts.quick), **typed})
        try:
            return stage.resolve(options, Context(self.shape, frozenset(typed), self.plan_of, registry.load_run))
        except NotRun as e:
            if e.reason:
                self.notes.append(e.reason)
            return None


def prepare(args: argparse.Namespace, shape: JobShape) -> RunPlan:
    opts = RunOptions(**argtypes.given(args, RunOptions))
    rules = load_rules(opts.rules) if opts.rules else registry.default_rules()
    changes = [r.name for r in rules if r.function == "change"]
    if changes:
        raise UsageError(f"--rules {opts.rules}: rule {changes[0]!r} uses function change, which needs a baseline: "
                         "judge the finished run with clusterbench compare RUN --baseline FILE --rules FILE")
    resolver = _Resolver(args, shape, opts)
    stages = tuple((s, resolver.plan_of(s.name)) for s in registry.STAGES)
    # --expect-busbw is in GB/s; run.json keeps busbw in Gbps.
    expected = {EXPECTED_BUSBW_METRIC: Expected(opts.expect_busbw * BITS_PER_BYTE, "given", "this cluster",
                                                "--expect-busbw")} if opts.expect_busbw else {}
    teams = tuple(tables(list(opts.expected or ())))  # a bad file fails before any rank starts
    return RunPlan(tuple((s, p) for s, p in stages if p is not None), tuple(rules), expected, teams,
                   tuple(resolver.notes))


def work(rank: Any, plan: RunPlan) -> None:
    for i, (stage, stage_plan) in enumerate(plan.stages, 1):
        rank.say(f"\n== [{i}/{len(plan.stages)}] {stage.name}")
        with rank.stage(stage.name):
            stage.work(rank, stage_plan)


def conclude(run: Run, plan: RunPlan, run_dir: Path) -> int:
    """Each stage's conclusion, then the verdicts by the rules, the report and the summary."""
    for note in plan.notes:
        print(f"# {note}", flush=True)
    for stage, stage_plan in plan.stages:
        stage.conclude(run, stage_plan)
    metrics = registry.metrics_of(run)
    attach(run, metrics, list(plan.tables), plan.expected)
    run.verdicts = judge(metrics, run.expected, list(plan.rules))
    run.verdict = overall(run.verdicts)
    report = registry.render_report(run_dir, run)
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
    add_arguments, prepare, work, conclude, tuple(dict.fromkeys(m for stage in registry.STAGES for m in stage.imports)),
)
