"""`clusterbench align RUN --reference REF`: judge a finished train run against a reference curve."""

from __future__ import annotations

import argparse

from clusterbench.errors import RunFailed, UsageError
from clusterbench.results.folder import load_run
from clusterbench.runtime.command import ToolCommand
from clusterbench.stages.train import alignment, references
from clusterbench.stages.train.options import add_limit_arguments


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a train run folder or its run.json")
    p.add_argument("--reference", required=True, help="reference file or shipped name")
    add_limit_arguments(p)


def main(args: argparse.Namespace) -> int:
    """Exit 1 on FAIL."""
    run = load_run(args.run)
    if run.train is None:
        raise UsageError(f"{args.run}: not a clusterbench train run (run.json has no train section)")
    ref, label = references.load(args.reference)
    why = references.mismatch(ref, run.train.config)
    if why:
        raise UsageError(f"--reference {label}: {why}")
    limits = alignment.limits_for(ref.losses, ref.noise_band, args.variance_limit, args.mre_limit)
    result = alignment.compare(run.train.losses, ref.losses, limits, run.train.config.steps, label)
    print(alignment.table(result))
    if result.verdict == "FAIL":
        raise RunFailed("alignment FAIL: " + "; ".join(result.reasons))
    return 0


COMMAND = ToolCommand("align", "judge a finished train run against a reference loss curve", add_arguments, main)
