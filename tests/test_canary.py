"""The numerics canary: the tiny float32 task on the run's hardware, judged against the CPU curve."""

from __future__ import annotations

import pytest
from report_fixtures import as_run, gpu_run_doc

from clusterbench.errors import UsageError
from clusterbench.shape import JobShape
from clusterbench.stages.canary.records import CANARY
from clusterbench.stages.canary.stage import CANARY_STAGE
from clusterbench.stages.registry import judge, page
from clusterbench.stages.stage import Context, NoOptions, NotRun
from clusterbench.stages.train import alignment, references
from clusterbench.stages.train import job as train_job
from clusterbench.stages.train.options import TrainOptions
from clusterbench.stages.train.records import Train


def _verdict(run, check: str):
    return next((v for v in judge(run) if v.check == check), None)


def _with_canary(scale: float):
    """A GPU run whose canary trained the reference's curve times `scale`."""
    ref, label = references.load(train_job.CANARY_REFERENCE)
    losses = [x * scale for x in ref.losses]
    limits = alignment.limits_for(ref.losses, ref.noise_band)
    canary = train_job.canary(8)  # the same job on any device type
    doc = gpu_run_doc({"hostname": "a"}, verdicts=[])
    run = as_run(doc)
    CANARY.set(run, Train(config=canary.config, losses=losses,
                                     alignment=alignment.compare(losses, ref.losses, limits, 100, label)))
    return run


def test_a_device_that_computes_other_numbers_fails_the_canary() -> None:
    assert _verdict(_with_canary(1.0), "numerics canary").status == "PASS"
    wrong = _with_canary(1.03)  # 3% off at every step
    v = _verdict(wrong, "numerics canary")
    assert v.status == "FAIL" and "tiny-cpu-float32" in v.detail
    assert 'id="canary"' in page(wrong) and "Numerics canary" in page(wrong)


def test_without_a_canary_there_is_no_line() -> None:
    assert _verdict(as_run(gpu_run_doc({"hostname": "a"}, verdicts=[])), "numerics canary") is None


def test_the_canary_is_the_shipped_task_and_says_when_it_cannot_run() -> None:
    job = train_job.canary(8)
    assert job.exact_float32 and job.reference_label == "tiny-cpu-float32"
    assert (job.config.preset, job.config.dtype, job.config.global_batch, job.config.seq_len) == (
        "tiny", "float32", 16, 64)
    with pytest.raises(UsageError, match="smaller than the 17 ranks"):
        train_job.canary(17)  # some rank would hold none of the 16 rows
    # As a stage: it comes with a train stage that is not already its task, and says why it cannot run.
    other = train_job.build(TrainOptions(preset="tiny", seed=3), "cpu", 2)
    for world, train, reason in ((8, None, None), (8, job, None), (17, other, "give each of 17 ranks a row")):
        with pytest.raises(NotRun) as left_out:
            CANARY_STAGE.resolve(NoOptions(),
                                 Context(JobShape(world, "cpu", "gloo", world), plan_of=lambda _, job=train: job))
        assert (left_out.value.reason is None) if reason is None else reason in left_out.value.reason
    # 3 ranks hold 6+5+5 of the 16 rows, each in 2 micro-batches.
    uneven = CANARY_STAGE.resolve(NoOptions(), Context(JobShape(3, "cpu", "gloo", 3), plan_of=lambda _: other))
    assert uneven.exact_float32 and (uneven.config.micro_batch, uneven.config.grad_accum) == (3, 2)
