"""A stage that is also a command of its own (`clusterbench comm`, `clusterbench train`): the same
options, resolve and work as in `run`, and its conclusion; then what systems like this one
measure, printed and kept, and an exit code from the stage's own checks (any FAIL is exit 1,
naming the check)."""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import Any

from clusterbench import argtypes
from clusterbench.analyse import expected
from clusterbench.analyse.verdicts import judge
from clusterbench.errors import EXIT_OK, RunFailed, UsageError
from clusterbench.results.run import Run
from clusterbench.runtime.command import RankCommand
from clusterbench.shape import JobShape
from clusterbench.stages.registry import STAGES, default_rules, load_run, metrics_of, render_report
from clusterbench.stages.stage import Context, NotRun, Stage


def prepare(stage: Stage, args: argparse.Namespace, shape: JobShape) -> Any:
    given = argtypes.given(args, stage.options)
    try:
        return stage.resolve(stage.options(**given), Context(shape, frozenset(given), load_run=load_run))
    except NotRun as e:
        raise UsageError(e.reason or f"the {stage.name} stage has nothing to run here") from None


def conclude(stage: Stage, run: Run, plan: Any, run_dir: Path) -> int:
    stage.conclude(run, plan)
    metrics = metrics_of(run)
    expected.attach(run, metrics, expected.tables([]), {})
    for line in expected.lines(run, metrics):
        print(line, flush=True)
    rules = [r for r in default_rules() if r.name in stage.checks]
    if len(rules) != len(stage.checks):  # a renamed default rule must not let failures pass
        raise LookupError(f"the default rules lack one of the checks {stage.checks}")
    if stage.writes_report:
        print(f"# report: {render_report(run_dir, run)}", flush=True)
    for v in judge(metrics, run.expected, rules):
        if v.status == "FAIL":
            raise RunFailed(f"{v.check} FAIL: {v.detail}")
    return EXIT_OK


def command(stage: Stage) -> RankCommand:
    return RankCommand(stage.name, stage.command or stage.name, stage.add_arguments, partial(prepare, stage),
                       stage.work, partial(conclude, stage), stage.imports)


COMMANDS = tuple(command(stage) for stage in STAGES if stage.command)
