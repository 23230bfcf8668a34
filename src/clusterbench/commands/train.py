"""`clusterbench train`: the fine-tuning benchmark, tgs, TFLOPS/MFU, and loss alignment.

Exit codes: 0 when the run completes and, if it was judged, PASSes; 1 when the alignment
verdict is FAIL or a loss turns NaN/inf (the steps measured so far are kept); 2 for bad input,
a mismatched reference and out of memory.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from clusterbench import args as argtypes
from clusterbench.analyse import expected
from clusterbench.analyse.verdicts import conclude_stage
from clusterbench.harness import Plan, RankCommand
from clusterbench.results.schema import Run
from clusterbench.train import job, options
from clusterbench.train.bench import run_train


def prepare(args: argparse.Namespace, plan: Plan) -> job.TrainJob:
    return job.build(options.build(argtypes.given(args, options.TrainOptions)), plan.device_type, plan.world_size)


def conclude(run: Run, train_job: job.TrainJob, run_dir: Path) -> int:
    job.judge(run, train_job)
    expected.conclude(run)
    return conclude_stage(run, "train")


COMMAND = RankCommand(
    "train", "fine-tuning benchmark: tgs, TFLOPS/MFU, loss alignment",
    options.add_arguments, prepare, run_train, conclude,
)
