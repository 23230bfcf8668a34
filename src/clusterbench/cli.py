"""The clusterbench commands: parse, call, print. Errors become one line and an exit code."""

from __future__ import annotations

import argparse
import os
import sys

from clusterbench import __version__
from clusterbench.comm import command as comm_command
from clusterbench.compare import command as compare_command
from clusterbench.errors import RunFailed, UsageError
from clusterbench.hw import command as info_command
from clusterbench.hw import peak_command
from clusterbench.launch import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, RunFailedInterrupted
from clusterbench.report import command as report_command
from clusterbench.suite import command as run_command
from clusterbench.train import command as train_command


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option is one line and exit 2, like every other error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"clusterbench: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)


# name, help, the module's argument adder and entry point, and whether it starts ranks.
COMMANDS = (
    ("run", "the whole verdict: hardware, peaks, comm, SFT + alignment, report",
     run_command.add_arguments, run_command.main, True),
    ("comm", "collective-communication benchmark over torch.distributed",
     comm_command.add_arguments, comm_command.main, True),
    ("train", "fine-tuning benchmark: tgs, TFLOPS/MFU, loss alignment",
     train_command.add_arguments, train_command.main, True),
    ("align", "judge a finished train run against a reference loss curve",
     train_command.add_align_arguments, train_command.align_main, False),
    ("peak", "measured matmul TFLOP/s per dtype and copy GB/s of the local devices",
     peak_command.add_arguments, peak_command.main, False),
    ("info", "the hardware picture: CPU, memory, GPUs, links, topology, NICs",
     info_command.add_arguments, info_command.main, False),
    ("report", "(re)render report.html from a run folder's run.json",
     report_command.add_arguments, report_command.main, False),
    ("compare", "judge run B against run A, a baseline or rules (exit 1 on fail)",
     compare_command.add_compare_arguments, compare_command.compare_main, False),
    ("baseline", "summarise several runs into a baseline JSON",
     compare_command.add_baseline_arguments, compare_command.baseline_main, False),
)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="clusterbench", description="Is this hardware fit to train, and how fast is it?")
    parser.add_argument("--version", action="version", version=f"clusterbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, text, add_arguments, func, starts_ranks in COMMANDS:
        cmd = sub.add_parser(name, help=text, description=text)
        add_arguments(cmd)
        if starts_ranks:
            comm_command.add_launch_arguments(cmd)
        cmd.set_defaults(func=func)
    return parser


def main(argv: list[str] | None = None) -> int:
    # transformers' advisory warnings would break the one-line error contract; ranks inherit this.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as e:
        print(f"clusterbench: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except RunFailedInterrupted as e:
        print(f"clusterbench: {e}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except RunFailed as e:
        print(f"clusterbench: FAILED: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("clusterbench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
