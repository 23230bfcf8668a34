"""The clusterbench commands: parse, call, print. Errors become one line and an exit code."""

from __future__ import annotations

import argparse
import sys

from clusterbench import __version__
from clusterbench.comm import command as comm_command
from clusterbench.errors import RunFailed, UsageError
from clusterbench.launch import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, RunFailedInterrupted
from clusterbench.train import command as train_command
from clusterbench.train import peak_command


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option is one line and exit 2, like every other error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"clusterbench: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="clusterbench", description="Is this hardware fit to train, and how fast is it?")
    parser.add_argument("--version", action="version", version=f"clusterbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    comm = sub.add_parser("comm", help="collective-communication benchmark over torch.distributed")
    comm_command.add_arguments(comm)
    comm_command.add_launch_arguments(comm)
    comm.set_defaults(func=comm_command.main)
    train = sub.add_parser("train", help="fine-tuning benchmark: tgs, TFLOPS/MFU, loss alignment")
    train_command.add_arguments(train)
    comm_command.add_launch_arguments(train)
    train.set_defaults(func=train_command.main)
    align = sub.add_parser("align", help="judge a finished train run against a reference loss curve")
    train_command.add_align_arguments(align)
    align.set_defaults(func=train_command.align_main)
    peak = sub.add_parser("peak", help="measured matmul TFLOP/s per dtype and copy GB/s of the local devices")
    peak_command.add_arguments(peak)
    peak.set_defaults(func=peak_command.main)
    return parser


def main(argv: list[str] | None = None) -> int:
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
