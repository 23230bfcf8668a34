"""`clusterbench report RUN_DIR`: (re)render report.html from a run folder's run.json."""

from __future__ import annotations

import argparse

from clusterbench.harness import ToolCommand


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (or its run.json)")


def main(args: argparse.Namespace) -> int:
    # Imported here: matplotlib costs every other command, and every spawned rank, half a second.
    from clusterbench.report.html import render_report

    print(f"report: {render_report(args.run_dir)}")
    return 0


COMMAND = ToolCommand("report", "(re)render report.html from a run folder's run.json", add_arguments, main)
