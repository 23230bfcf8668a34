"""`clusterbench diagnose TARGET`: why a number is what it is, from NCCL's own log
(docs/methodology.md §9).

TARGET is a run folder (its run.json's `nccl` section, else its nccl/ logs), an NCCL log file,
or a folder of them. Prints NCCL's picture of the run and the NCCL checks of the default rules,
judged with the run's hardware picture where there is one. Exit 1 when a check FAILs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from clusterbench.analyse.nccl import picture
from clusterbench.analyse.rules import default_rules
from clusterbench.command import ToolCommand
from clusterbench.errors import EXIT_FAILED, EXIT_OK, UsageError
from clusterbench.nccl.log import parse_files
from clusterbench.registry import judge
from clusterbench.results.folder import NCCL_LOGS, load_run
from clusterbench.results.nccl import NcclFacts
from clusterbench.results.schema import Run


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="TARGET", type=Path, help="a run folder, an NCCL log file, or a folder of them")


def _run_of(target: Path) -> Run:
    """The run to diagnose: a run folder's own, else one made of the logs alone."""
    if (target / "run.json").exists():
        run = load_run(target)
        logs = sorted((target / NCCL_LOGS).glob("*.log"))
        if run.nccl is None and logs:
            run.nccl = parse_files(logs)
        if run.nccl is None:
            raise UsageError(f"{target} holds no NCCL log: diagnose needs a run on the nccl backend")
        return run
    logs = [target] if target.is_file() else sorted(target.glob("*.log")) if target.is_dir() else []
    if not logs:
        raise UsageError(f"no run folder or NCCL log at {target}")
    facts = parse_files(logs)
    if facts == NcclFacts():
        raise UsageError(f"{target}: no NCCL INFO lines (was it written with NCCL_DEBUG=INFO?)")
    return Run(command="diagnose", nccl=facts)


def main(args: argparse.Namespace) -> int:
    run = _run_of(args.target)
    for line in picture(run.nccl):
        print(line)
    checks = [r for r in default_rules() if all(p.startswith("nccl.") for p in r.patterns)]
    found = [v for v in judge(run, checks) if v.status != "SKIP"]
    print("\n== findings")
    for v in found:
        print(f"  {v.status:<5} {v.check:<16} {v.detail}")
    if not found:
        print("  nothing to judge: the log shows no network link" + (
            "; the RDMA and NVLink checks also need a run folder's hardware picture" if run.hardware is None else ""))
    return EXIT_FAILED if any(v.status == "FAIL" for v in found) else EXIT_OK


COMMAND = ToolCommand("diagnose", "why the numbers are what they are: NCCL's own log, read and judged",
                      add_arguments, main)
