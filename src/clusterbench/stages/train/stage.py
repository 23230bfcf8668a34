"""The train stage: the fine-tuning benchmark with its loss alignment (docs/methodology.md §4, §5),
also `clusterbench train`. The numerics canary (stages/canary/stage.py) runs the same way into its own
section."""

from __future__ import annotations

from typing import TYPE_CHECKING

from clusterbench.analyse.metrics import Metrics
from clusterbench.report.blocks import Part
from clusterbench.results.folder import RunFolder
from clusterbench.results.run import Run
from clusterbench.stages.stage import Context, Stage
from clusterbench.stages.train import options
from clusterbench.stages.train.metrics import metrics
from clusterbench.stages.train.records import TRAIN, TRAIN_STEPS, Train

if TYPE_CHECKING:
    from clusterbench.runtime.rank import Rank
    from clusterbench.stages.train.job import TrainJob
    from clusterbench.stages.train.measure import Keep


def resolve(opts: options.TrainOptions, context: Context) -> TrainJob:
    from clusterbench.stages.train import job  # torch and transformers: only once a run resolves its stages

    return job.build(opts, context.shape.device_type, context.shape.world_size)


def fine_tune(rank: Rank, job: TrainJob, keep: Keep, step_rows: bool) -> None:
    """A fine-tuning task on every rank, its record kept by `keep` in its stage's section."""
    from clusterbench.stages.train.measure import measure  # torch: only on the ranks

    measure(rank, job, keep, step_rows)


def task_parts(train: Train | None, anchor: str, nav: str, title: str, lead: str = "") -> list[Part]:
    """A fine-tuning task's section of the report, when run.json has one."""
    from clusterbench.stages.train.report import (  # matplotlib: only where a report is rendered
        plot_count,
        train_section,
    )

    if train is None:
        return []
    return [Part(anchor, nav, train_section(train, anchor, title, lead), plot_count(train))]


def _keep(folder: RunFolder, record: Train) -> None:
    folder.record(train=record)


def work(rank: Rank, job: TrainJob) -> None:
    fine_tune(rank, job, _keep, step_rows=True)


def report(run: Run, metrics: Metrics) -> list[Part]:
    return task_parts(TRAIN.of(run), "train", "Fine-tuning", "Fine-tuning")


def conclude(run: Run, job: TrainJob) -> None:
    from clusterbench.stages.train.job import judge, save_reference

    judge(TRAIN.of(run), job)
    save_reference(run, job)


# The model's code a rank trains with (transformers loads it on first use), and all a training rank imports.
MODEL_IMPORTS = ("transformers", "transformers.models.llama.modeling_llama")
RANK_IMPORTS = ("clusterbench.stages.train.measure", "clusterbench.stages.train.job", *MODEL_IMPORTS)

TRAIN_STAGE = Stage(
    name="train", options=options.TrainOptions, resolve=resolve, work=work, sections=(TRAIN, TRAIN_STEPS),
    metrics=metrics, report=report, conclude=conclude,
    command="fine-tuning benchmark: tgs, TFLOPS/MFU, loss alignment", checks=("training", "loss alignment", "slow rank"),
    imports=RANK_IMPORTS,
)
