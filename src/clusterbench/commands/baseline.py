"""`clusterbench baseline RUN_DIR... -o FILE`: several runs summarised into one baseline."""

from __future__ import annotations

import argparse

from clusterbench.analyse import baseline
from clusterbench.command import ToolCommand
from clusterbench.errors import EXIT_OK
from clusterbench.registry import metrics_of
from clusterbench.results.folder import check_output, load_run


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", metavar="RUN_DIR", nargs="+", help="run folders to summarise")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="baseline JSON to write (a new file)")
    p.add_argument("--overwrite", action="store_true", help="replace FILE when it exists")


def main(args: argparse.Namespace) -> int:
    output = check_output(args.output, "-o", args.overwrite)  # before reading: a refusal costs nothing
    doc = baseline.build([(str(run), metrics_of(load_run(run)).values) for run in args.runs])
    path = baseline.write(doc, output)
    print(f"# baseline: {len(doc.metrics)} metrics over {len(args.runs)} runs -> {path}")
    return EXIT_OK


COMMAND = ToolCommand("baseline", "summarise several runs into a baseline JSON", add_arguments, main)
