"""The comm stage: the collective sweep (docs/methodology.md §1, §8, §13), also `clusterbench comm`.

Its conclusion fits the alpha-beta cost model to the rows it measured (§14)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clusterbench.analyse.metrics import Metrics
from clusterbench.collectives import ALL_OPS
from clusterbench.report.blocks import Part
from clusterbench.results.run import Run
from clusterbench.shape import JobShape
from clusterbench.stages.comm import plan
from clusterbench.stages.comm.cost_model import fit_cost_model
from clusterbench.stages.comm.metrics import metrics
from clusterbench.stages.comm.records import COMM, COMM_OPTIONS, COST_MODEL, PAIRS, CommOptions
from clusterbench.stages.stage import Context, Stage

if TYPE_CHECKING:
    from clusterbench.runtime.rank import Rank

# What `run` sweeps, per hardware; unset, --max-bytes on a GPU keeps comm's own cap at free memory.
RUN_DEFAULTS: dict[str, dict[str, Any]] = {"cpu": {"ops": ALL_OPS, "max_bytes": 16 * 1024**2}, "cuda": {"ops": ALL_OPS}}
# run --quick: a short sweep.
QUICK: dict[str, Any] = {"ops": ("all_reduce", "all_gather"), "max_bytes": 1024**2, "step_factor": 4.0,
                         "time_budget_s": 0.05}


def run_defaults(shape: JobShape, quick: bool) -> dict[str, Any]:
    return QUICK if quick else RUN_DEFAULTS["cuda" if shape.device_type == "cuda" else "cpu"]


def resolve(opts: CommOptions, context: Context) -> plan.CommPlan:
    return plan.resolve(opts, context.typed, context.shape)


def work(rank: Rank, sweep_plan: plan.CommPlan) -> None:
    from clusterbench.stages.comm.sweep import sweep  # torch: only on the ranks

    sweep(rank, sweep_plan)


def report(run: Run, metrics: Metrics) -> list[Part]:
    from clusterbench.stages.comm import cost_model_report, pairs_report
    from clusterbench.stages.comm.report import comm_section, plot_count

    parts = []
    if COMM.of(run):
        parts.append(Part("comm", "Communication", comm_section(run, metrics), plot_count(run)))
    if COST_MODEL.of(run):
        parts.append(Part("model", "Model", cost_model_report.cost_model_section(run),
                          cost_model_report.plot_count(run)))
    if PAIRS.of(run):
        parts.append(Part("pairs", "Pairwise links", pairs_report.pairs_section(run),
                          plots=pairs_report.plot_count(run)))
    return parts


def conclude(run: Run, sweep_plan: plan.CommPlan) -> None:
    COST_MODEL.set(run, fit_cost_model(run))


COMM_STAGE = Stage(
    name="comm", options=CommOptions, resolve=resolve, work=work, sections=(COMM_OPTIONS, COMM, PAIRS, COST_MODEL),
    metrics=metrics, report=report, conclude=conclude,
    run_defaults=run_defaults, command="collective-communication benchmark over torch.distributed",
    checks=("comm correctness", "NCCL network"),
)
