"""`clusterbench comm`: the collective-communication sweep (docs/methodology.md §1)."""

from __future__ import annotations

import argparse
from pathlib import Path

from clusterbench import args as argtypes
from clusterbench.analyse import expected
from clusterbench.analyse.verdicts import conclude_stage
from clusterbench.comm import options
from clusterbench.comm.bench import run_comm
from clusterbench.harness import Plan, RankCommand
from clusterbench.results.schema import CommOptions, Run


def prepare(args: argparse.Namespace, plan: Plan) -> CommOptions:
    opts = options.build(argtypes.given(args, CommOptions))
    local_ranks = None if plan.joined else plan.world_size
    options.validate(opts, plan.world_size, plan.device_type, local_ranks, plan.dist.backend)
    return opts


def conclude(run: Run, opts: CommOptions, run_dir: Path) -> int:
    """What systems like this measure, printed and kept; any wrong element fails the run (exit 1),
    naming the op and size."""
    expected.conclude(run)
    return conclude_stage(run, "comm")


COMMAND = RankCommand(
    "comm", "collective-communication benchmark over torch.distributed",
    options.add_arguments, prepare, run_comm, conclude,
)
