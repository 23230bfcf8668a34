"""`clusterbench align RUN --reference REF`: judge a finished train run against a reference curve."""

from __future__ import annotations

import argparse

from clusterbench.errors import RunFailed, UsageError
from clusterbench.runtime.command import ToolCommand
from clusterbench.stages.registry import load_run
from clusterbench.stages.train import alignment, references
from clusterbench.stages.train.options import add_limit_arguments
from clusterbench.stages.train.records import TRAIN


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a train run folder or its run.json")
    p.add_argument("--reference", required=True, help="reference file or shipped name")
    add_limit_arguments(p)


def main(args: argparse.Namespace) -> int:
    """Exit 1 on FAIL."""
    run = load_run(args.run)
    if TRAIN.of(run) is None:
        raise UsageError(f"{args.run}: not a clusterbench train run (run.json has no train section)")
    ref, label = references.load(args.reference)
    why = references.mismatch(ref, TRAIN.of(run).config)
    if why:
        raise UsageError(f"--reference {label}: {why}")
    limits = alignment.limits_for(ref.losses, ref.noise_band, args.variance_limit, args.mre_limit)
    result = alignment.compare(TRAIN.of(run).losses, ref.losses, limits, TRAIN.of(run).config.steps, label)
    print(alignment.table(result))
    if result.verdict == "FAIL":
        raise RunFailed("alignment FAIL: " + "; ".join(result.reasons))
    return 0


COMMAND = ToolCommand("align", "judge a finished train run against a reference loss curve", add_arguments, main)
