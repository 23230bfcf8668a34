"""The command table: parse, hand over to the command, print the one-line error and exit with its code."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from clusterbench import __version__, publish
from clusterbench.commands import (
    align,
    baseline,
    check,
    compare,
    cost_model,
    diagnose,
    history,
    info,
    peak,
    report,
    run,
    stage,
    store,
)
from clusterbench.errors import EXIT_BUG, EXIT_FAILED, EXIT_INTERRUPTED, Interrupted, RunFailed, UsageError, one_line
from clusterbench.inputs.printable import printable
from clusterbench.results import outputs
from clusterbench.runtime import launchers
from clusterbench.runtime.command import Command, RankCommand, ToolCommand
from clusterbench.secrets import masked
from clusterbench.stages import registry

COMMANDS: tuple[Command, ...] = (
    run.COMMAND,
    *stage.COMMANDS,  # the stages that are commands of their own: comm, train
    align.COMMAND,
    peak.COMMAND,
    info.COMMAND,
    report.COMMAND,
    compare.COMMAND,
    baseline.COMMAND,
    diagnose.COMMAND,
    check.COMMAND,
    cost_model.COMMAND,
    store.COMMAND,
    history.COMMAND,
)


_LONGEST = 300  # characters of argparse's own message: an error stays one readable line


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option is one line and exit 2, like every other error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        message = shown(message)  # argparse repeats what was typed: a URL's password, a newline, too
        if len(message) > _LONGEST:  # argparse repeats a bad value whole, however long
            message = message[:_LONGEST] + "..."
        print(f"clusterbench: error: {message} (see {shown(self.prog)} --help)", file=sys.stderr)
        sys.exit(UsageError.exit_code)


def shown(text: str) -> str:
    """`text` as an error line prints it: its secrets masked, and whatever is not printable (a newline, a tab, a
    terminal's escape, a file name's undecodable byte) escaped, so that the line stays one line and says only
    what it says."""
    return printable(masked(text))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="clusterbench", description="Is this hardware fit to train, and how fast is it?")
    parser.add_argument("--version", action="version", version=f"clusterbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        # Commands that build typed options see only what the user typed; the options' own
        # defaults fill in the rest, so "not given" is never mistaken for a value.
        typed = not isinstance(command, ToolCommand)
        p = sub.add_parser(command.name, help=command.help, description=command.help,
                           argument_default=argparse.SUPPRESS if typed else None)
        command.add(p)
        p.set_defaults(chosen=command)
    return parser


def main(argv: list[str] | None = None) -> int:
    # transformers' advisory warnings would break the one-line error contract; ranks inherit this.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    args = build_parser().parse_args(argv)
    try:
        return _run(args.chosen, args)
    except UsageError as e:
        print(shown(f"clusterbench: error: {e}"), file=sys.stderr)
        return e.exit_code
    except Interrupted as e:
        print(shown(f"clusterbench: {e}"), file=sys.stderr)
        return e.exit_code
    except RunFailed as e:
        print(shown(f"clusterbench: FAILED: {e}"), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("clusterbench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `clusterbench ... | head`: the reader has gone, and Python would complain on exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except Exception as e:  # input no boundary caught is our bug, still said in one line
        if os.environ.get("CLUSTERBENCH_DEBUG"):
            raise
        print(shown(f"clusterbench: internal error: {one_line(e)}") + " (a bug in clusterbench: please report it; "
              "CLUSTERBENCH_DEBUG=1 shows where)", file=sys.stderr)
        return EXIT_BUG


def _run(command: Command, args: argparse.Namespace) -> int:
    if isinstance(command, RankCommand):
        launchers.detect()  # a seat that cannot exist is refused before torch takes seconds to load
        publish.outputs_of(args)  # and so is a store of an unknown kind, or a textfile nobody would read
        # and an output over a file it did not make, or over an input
        planned = outputs.check(_every_option(command, args), uses_store=True, run_files=_run_files)
        from clusterbench.runtime.harness import run_ranks  # torch: only for a command that starts ranks

        try:
            return run_ranks(command, args)
        finally:
            outputs.mark(planned)
    planned = outputs.check(args, uses_store=not isinstance(command, ToolCommand), run_files=_run_files)
    try:
        return command.main(args)
    finally:
        outputs.mark(planned)


def _run_files(folder: Path) -> list[Path]:
    return registry.run_folder(folder).files()


def _every_option(command: Command, args: argparse.Namespace) -> argparse.Namespace:
    """The options as given, with run's stage options typed in --STAGE-args "..." as --STAGE.option: an output
    or an input is one whichever form names it."""
    if command is not run.COMMAND:
        return args
    every = argparse.Namespace(**vars(args))
    for each in registry.STAGES:
        for name, value in run.typed_options(each, args).items():
            setattr(every, f"{each.name}.{name}", value)
    return every
