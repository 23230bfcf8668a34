"""The numerics canary: the CPU task (tiny preset, float32, TF32 off) trained on this hardware and
held against the shipped CPU curve, so a device that computes wrong numbers fails it
(docs/methodology.md §5). It comes with the train stage and is not run twice where the train
stage already is its task."""

from __future__ import annotations

from typing import TYPE_CHECKING

from clusterbench.analyse.metrics import Metrics
from clusterbench.errors import UsageError
from clusterbench.report.blocks import Part
from clusterbench.results.folder import RunFolder
from clusterbench.results.run import Run
from clusterbench.stages.canary.records import CANARY
from clusterbench.stages.stage import Context, NoOptions, NotRun, Stage
from clusterbench.stages.train.metrics import canary_metrics
from clusterbench.stages.train.records import Train
from clusterbench.stages.train.stage import RANK_IMPORTS, fine_tune, task_parts

if TYPE_CHECKING:
    from clusterbench.runtime.rank import Rank
    from clusterbench.stages.train.job import TrainJob

LEAD = ("The tiny float32 task with TF32 off, trained on this hardware and held against the curve it makes on "
        "CPUs: a device that computes wrong numbers departs from it (docs/methodology.md §5).")


def resolve(opts: NoOptions, context: Context) -> TrainJob:
    from clusterbench.stages.train import job  # torch and transformers: only once a run resolves its stages

    train = context.plan_of("train")
    if train is None or train.reference_label == job.CANARY_REFERENCE:
        raise NotRun()
    try:
        return job.canary(context.shape.world_size)
    except UsageError:
        rows = job.CANARY_OPTIONS.global_batch
        raise NotRun(f"the numerics canary is not run: its {rows} rows per step cannot give each of "
                     f"{context.shape.world_size} ranks a row (it runs on up to {rows})") from None


def _keep(folder: RunFolder, train: Train) -> None:
    folder.record(canary=train)


def work(rank: Rank, canary: TrainJob) -> None:
    fine_tune(rank, canary, _keep, step_rows=False)


def report(run: Run, metrics: Metrics) -> list[Part]:
    return task_parts(CANARY.of(run), "canary", "Canary", "Numerics canary", LEAD)


def conclude(run: Run, canary: TrainJob) -> None:
    from clusterbench.stages.train.job import judge

    print("# numerics canary: the tiny float32 task on this hardware against the CPU curve", flush=True)
    judge(CANARY.of(run), canary)


CANARY_STAGE = Stage(
    name="canary", options=NoOptions, resolve=resolve, work=work, sections=(CANARY,), metrics=canary_metrics,
    report=report, conclude=conclude, imports=RANK_IMPORTS,
)
