"""`clusterbench report RUN_DIR`: (re)render report.html from a run folder's run.json."""

from __future__ import annotations

import argparse

from clusterbench.command import ToolCommand
from clusterbench.registry import render_report


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (or its run.json)")


def main(args: argparse.Namespace) -> int:
    print(f"report: {render_report(args.run_dir)}")
    return 0


COMMAND = ToolCommand("report", "(re)render report.html from a run folder's run.json", add_arguments, main)
