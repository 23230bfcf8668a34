"""The burnin stage, also `clusterbench burnin` (docs/burnin.md): every device under sustained load for a
duration, window by window, judged on what only time shows: a figure that drifts down, memory that flips bits,
a computation that stops repeating itself or leaves the majority of its kind. Not part of `run` unless one of
its options is given there (`run --burnin.level quick`): a soak is minutes to hours."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from clusterbench import argtypes
from clusterbench.analyse.metrics import Metrics
from clusterbench.nodechecks import node_rules
from clusterbench.report.blocks import Part
from clusterbench.results.run import Run
from clusterbench.shape import JobShape
from clusterbench.stages.burnin import metrics as analysis
from clusterbench.stages.burnin.plan import (
    LEVELS,
    MIN_WINDOW_S,
    WINDOW_S,
    WINDOWS,
    BurninOptions,
    BurninPlan,
    duration,
    plan_of,
)
from clusterbench.stages.burnin.records import BURNIN
from clusterbench.stages.stage import Context, NotRun, Stage
from clusterbench.telemetry.records import TELEMETRY

if TYPE_CHECKING:
    from clusterbench.runtime.rank import Rank

CHECKS = ("burnin memory", "burnin determinism", "burnin agreement", "burnin drift", "burnin soak", "burnin counters",
          "burnin counter warnings", "burnin uncorrected ECC", "burnin corrected ECC", "burnin throttling")


def _minutes(seconds: float) -> str:
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds / 60:g} min"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", type=duration,
                   help="how long to soak: seconds, or a number with s, m, h or d (90, 10m, 2h; at most 7 days); "
                        "instead of --level")
    p.add_argument("--level", choices=tuple(LEVELS),
                   help="how long to soak, after DCGM's levels: "
                        + ", ".join(f"{name} {_minutes(s)}" for name, s in LEVELS.items()) + " (default quick)")
    p.add_argument("--window", type=argtypes.real(MIN_WINDOW_S, strict=False, maximum=3600.0), metavar="SECONDS",
                   help=f"seconds each window of figures spans (default: the duration / {WINDOWS}, within "
                        f"{WINDOW_S[0]:g} to {WINDOW_S[1]:g})")
    p.add_argument("--memory-bytes", dest="memory_bytes", type=argtypes.size,
                   help="the memory test's region per device (default: about 80%% of a GPU's free memory; on a CPU "
                        "256M, or an eighth of the memory available shared by the host's ranks, if less)")
    p.add_argument("--tolerance", type=argtypes.real(0.0, maximum=1.0),
                   help="a figure drifts when it falls by more than this share and stays down (default 0.1)")
    node_rules.add_argument(p)


def run_defaults(shape: JobShape, quick: bool) -> dict[str, Any]:
    return {"in_run": True}


def resolve(opts: BurninOptions, context: Context) -> BurninPlan:
    if opts.in_run and not context.typed:
        raise NotRun()  # `run` soaks only when asked to
    available = None
    if context.shape.device_type == "cpu":
        from clusterbench.hw.host import meminfo_bytes  # /proc alone: where a CPU's region is checked

        available = meminfo_bytes(key="MemAvailable")
    return replace(plan_of(opts, available, context.shape.local_ranks or 1), rules=tuple(node_rules.load(opts.node_rules)))


def work(rank: Rank, plan: BurninPlan) -> None:
    from clusterbench.stages.burnin.soak import soak  # torch: only on the ranks

    soak(rank, plan)


def conclude(run: Run, plan: BurninPlan) -> None:
    found = analysis.section(run)
    if found is None:
        return
    judged = analysis.conclude(found, TELEMETRY.of(run), run.status != "complete", list(plan.rules))
    BURNIN.set(run, judged)
    by = analysis.series(judged.windows)
    devices = len(by)
    windows = min((analysis.measured(rows) for rows in by.values()), default=0)
    cut = f", cut short after {judged.elapsed_s:.1f} s: judged on what it measured" if judged.partial else ""
    print(f"\n== burnin: {windows} windows of {judged.window_s:.3g} s on {devices} devices{cut}", flush=True)
    for f in judged.findings:
        action = f"\n  {'':<8} action: {f.action}" if f.action and f.action not in f.what else ""
        print(f"  {f.severity.upper():<8} {f.subject}: {f.what}{action}")
    if not judged.findings:
        print("  nothing found")


def report(run: Run, metrics: Metrics) -> list[Part]:
    from clusterbench.stages.burnin.report import (  # matplotlib: only where a report is rendered
        burnin_section,
        plot_count,
    )

    found = analysis.judged(run)
    if found is None:
        return []
    return [Part("burnin", "Burn-in", burnin_section(found), plot_count(found))]


BURNIN_STAGE = Stage(
    name="burnin", options=BurninOptions, resolve=resolve, work=work, sections=(BURNIN,), add_arguments=add_arguments,
    metrics=analysis.metrics, report=report, conclude=conclude, run_defaults=run_defaults,
    command="every device under sustained load for a duration: drifts, memory errors, silent corruption",
    checks=CHECKS, writes_report=True, imports=("clusterbench.stages.burnin.soak",),
)
