"""`clusterbench diagnose TARGET`: why a number is what it is, from NCCL's own log
(docs/methodology.md §9), and why a job hung, from PyTorch's Flight Recorder (§21).

TARGET is a run folder (its run.json's `nccl` section, else its nccl/ logs; its flight/ dumps when
its ranks hung), an NCCL log file, a folder of them, or a folder of Flight Recorder dumps. Prints
NCCL's picture of the run and the NCCL checks of the default rules, judged with the run's hardware
picture where there is one, and the ranks that held the others up. Exit 1 when a check FAILs or a
dump names a rank that never entered the collective the others wait in; exit 2, "nothing to judge",
for dumps that record no collective or are of different jobs (flight/diagnosis.py).

Logs are streamed, so any size reads in flat memory. Of a folder only the regular files named
*.log are read; other entries so named (folders, FIFOs, broken links) are left out with a note. A
folder's logs must be one job's (nccl/jobs.py): the logs of unrelated jobs merged would describe
none of them. A log file given alone is read as one log, as its writer made it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from clusterbench import flight
from clusterbench.analyse.verdicts import conclusive, overall
from clusterbench.errors import EXIT_FAILED, EXIT_OK, UsageError
from clusterbench.inputs import files
from clusterbench.inputs.printable import printable
from clusterbench.nccl.jobs import read_folder
from clusterbench.nccl.log import read_files
from clusterbench.nccl.metrics import picture, unjudged
from clusterbench.nccl.records import NCCL, NcclFacts
from clusterbench.results.folder import FLIGHT_DUMPS, NCCL_LOGS
from clusterbench.results.run import Run
from clusterbench.runtime.command import ToolCommand
from clusterbench.stages.hardware.records import HARDWARE
from clusterbench.stages.registry import default_rules, judge, load_run


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="TARGET", type=Path, help="a run folder, an NCCL log file, a folder of them, or a folder of Flight Recorder dumps")


def _left_out(paths: list[Path]) -> str:
    """The entries left out, with what each is: a few named (a long name shortened), the rest counted."""
    named = ", ".join(f"{p.name if len(p.name) <= 60 else p.name[:57] + '...'} ({files.kind(p)})" for p in paths[:3])
    return named + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


def _log(path: Path) -> NcclFacts:
    """The facts in one log file: whoever wrote several jobs into one file chose them as one log."""
    facts, (source,) = read_files([path])
    if not source.nccl:
        raise UsageError(f"{path}: no NCCL INFO lines in it (is it NCCL's log, written with NCCL_DEBUG=INFO?)")
    return facts


def _run_of(target: Path) -> tuple[Run, list[Path]]:
    """The run to diagnose, a run folder's own or one made of the logs alone, and the entries left out."""
    if os.path.lexists(target / "run.json"):
        run = load_run(target)
        skipped: list[Path] = []
        if NCCL.of(run) is None:
            facts, skipped = read_folder(target / NCCL_LOGS, own=True)
            NCCL.set(run, facts)
        if NCCL.of(run) is None:
            raise UsageError(f"{target} holds no NCCL log: diagnose needs a run on the nccl backend"
                             + (f" (left out {_left_out(skipped)})" if skipped else ""))
        return run, skipped
    if files.is_regular(target):
        return Run(command="diagnose", sections={NCCL.name: _log(target)}), []
    if not os.path.isdir(target):
        raise UsageError(f"no run folder or NCCL log at {target}: it is {files.kind(target)}")
    facts, skipped = read_folder(target, own=False)
    if facts is None:
        raise UsageError(f"no run folder or NCCL log at {target}"
                         + (f" (left out {_left_out(skipped)}: only regular files are read)" if skipped else ""))
    return Run(command="diagnose", sections={NCCL.name: facts}), skipped


def _dumps_of(target: Path) -> Path | None:
    """The Flight Recorder dumps to read: TARGET itself when it is a folder of them, or a run folder's
    flight/ (written when its ranks hung)."""
    if flight.is_dump_folder(target):
        return target
    if os.path.lexists(target / "run.json") and flight.is_dump_folder(target / FLIGHT_DUMPS):
        return target / FLIGHT_DUMPS
    return None


def main(args: argparse.Namespace) -> int:
    dumps = _dumps_of(args.target)
    if dumps is None:
        return _nccl(args.target)
    lines, code = flight.diagnose(dumps)
    print("\n".join(map(printable, lines)))  # a folder's or a file's name may hold a newline of its own
    # A run that hung on gloo has dumps and no NCCL log: the dumps are the whole story.
    if dumps == args.target or not (os.path.lexists(args.target / NCCL_LOGS) or NCCL.of(load_run(args.target))):
        return code
    print()
    return max(code, _nccl(args.target))


def _nccl(target: Path) -> int:
    run, skipped = _run_of(target)
    if skipped:
        print(printable(f"clusterbench: note: left out {_left_out(skipped)}: only regular files are read"),
              file=sys.stderr)
    for line in picture(NCCL.of(run)):
        print(printable(line))
    checks = [r for r in default_rules() if all(p.startswith("nccl.") for p in r.patterns)]
    found = [v for v in judge(run, checks) if v.status != "SKIP"]
    print("\n== findings")
    for v in found:
        print(printable(f"  {v.status:<5} {v.check:<16} {v.detail}"))
    verdict = conclusive(overall(found), unjudged(NCCL.of(run)) + (
        "; the RDMA and NVLink checks also need a run folder's hardware picture" if HARDWARE.of(run) is None else ""))
    return EXIT_FAILED if verdict == "FAIL" else EXIT_OK


COMMAND = ToolCommand("diagnose", "why the numbers are what they are: NCCL's own log, read and judged",
                      add_arguments, main)
