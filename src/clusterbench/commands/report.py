"""`clusterbench report RUN_DIR`: (re)render report.html from a run folder's run.json.

The page is written whatever its verdicts; when every check was skipped the command says
"nothing judged" and exits 2, as `run` and `compare` do, rather than leave a silent success.
"""

from __future__ import annotations

import argparse

from clusterbench.analyse.verdicts import conclusive, overall
from clusterbench.errors import EXIT_OK
from clusterbench.runtime.command import ToolCommand
from clusterbench.stages.registry import load_run, render_report, shown_verdicts


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (or its run.json)")


def main(args: argparse.Namespace) -> int:
    run = load_run(args.run_dir)
    print(f"report: {render_report(args.run_dir, run)}")
    conclusive(overall(shown_verdicts(run)), "every check of this run was skipped (the report says why)")
    return EXIT_OK


COMMAND = ToolCommand("report", "(re)render report.html from a run folder's run.json", add_arguments, main)
