"""The burnin stage, also `clusterbench burnin` (docs/burnin.md): every device under sustained load for a
duration, window by window, judged on what only time shows: a figure that drifts down, memory that flips bits,
a computation that stops repeating itself or leaves the majority of its kind. Not part of `run` unless one of
its options is given there (`run --burnin.level quick`): a soak is minutes to hours."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from clusterbench.analyse.metrics import Metrics
from clusterbench.nodechecks import node_rules
from clusterbench.report.blocks import Part
from clusterbench.results.run import Run
from clusterbench.shape import JobShape
from clusterbench.stages.burnin.metrics import judge_soak, measured, metrics, section, series
from clusterbench.stages.burnin.options import BurninOptions
from clusterbench.stages.burnin.plan import BurninPlan, plan_of
from clusterbench.stages.burnin.records import BURNIN
from clusterbench.stages.stage import Context, NotRun, Stage
from clusterbench.telemetry.records import TELEMETRY

if TYPE_CHECKING:
    from clusterbench.runtime.rank import Rank

CHECKS = ("burnin memory", "burnin determinism", "burnin agreement", "burnin drift", "burnin soak", "burnin counters",
          "burnin counter warnings", "burnin uncorrected ECC", "burnin corrected ECC", "burnin throttling")


def run_defaults(shape: JobShape, quick: bool) -> dict[str, Any]:
    return {"in_run": True}


def resolve(opts: BurninOptions, context: Context) -> BurninPlan:
    if opts.in_run and not context.typed:
        raise NotRun()  # `run` soaks only when asked to
    available = None
    if context.shape.device_type == "cpu":
        from clusterbench.hw.host import meminfo_bytes  # /proc alone: where a CPU's region is checked

        available = meminfo_bytes(key="MemAvailable")
    return replace(plan_of(opts, available, context.shape.local_ranks or 1),
                   rules=tuple(node_rules.load(opts.node_rules)))


def work(rank: Rank, plan: BurninPlan) -> None:
    from clusterbench.stages.burnin.soak import soak  # torch: only on the ranks

    soak(rank, plan)


def conclude(run: Run, plan: BurninPlan) -> None:
    found = section(run)
    if found is None:
        return
    judged = judge_soak(found, TELEMETRY.of(run), run.status != "complete", list(plan.rules))
    BURNIN.set(run, judged)
    by = series(judged.windows)
    devices = len(by)
    windows = min((measured(rows) for rows in by.values()), default=0)
    cut = f", cut short after {judged.elapsed_s:.1f} s: judged on what it measured" if judged.partial else ""
    print(f"\n== burnin: {windows} windows of {judged.window_s:.3g} s on {devices} devices{cut}", flush=True)
    for f in judged.findings:
        action = f"\n  {'':<8} action: {f.action}" if f.action and f.action not in f.what else ""
        print(f"  {f.severity.upper():<8} {f.subject}: {f.what}{action}")
    if not judged.findings:
        print("  nothing found")


def report(run: Run, metrics: Metrics) -> list[Part]:
    from clusterbench.stages.burnin.report import soak_parts  # matplotlib: only where a report is rendered

    return soak_parts(run)


BURNIN_STAGE = Stage(
    name="burnin", options=BurninOptions, resolve=resolve, work=work, sections=(BURNIN,),
    metrics=metrics, report=report, conclude=conclude, run_defaults=run_defaults,
    command="every device under sustained load for a duration: drifts, memory errors, silent corruption",
    checks=CHECKS, writes_report=True, imports=("clusterbench.stages.burnin.soak",),
)
