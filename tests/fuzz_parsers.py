"""The command line as its parsers declare it: every command, what it requires, and every option of a kind
the hostile tables try (a file it writes, a URL it takes), so that a new option or command meets the
tables without anyone adding it to a list. Run's stage options count in each form they are typed in:
--STAGE.option and --STAGE-args "--option ...".
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

from clusterbench.cli import build_parser
from clusterbench.results import outputs
from clusterbench.stages import registry

# Options whose value is a URL: by metavar, or the one that takes a path or a URL.
_URL = re.compile(r"URL")


def commands() -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(words, parser) of every command a user can run: `comm`, `store import`, `model predict` ..."""
    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...],
                                                                                           argparse.ArgumentParser]]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield words, parser
        for sub in subs:
            for name, child in sub.choices.items():
                yield from walk(child, (*words, name))
    yield from walk(build_parser(), ())


def _value_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.nargs != 0 and not isinstance(a, argparse._HelpAction)]


def required(parser: argparse.ArgumentParser, leave: str = "") -> list[str]:
    """Words that satisfy what `parser` requires (its positionals, its required options) but option `leave`:
    the first choice where it has choices, else the first of a few values its type takes."""
    words: list[str] = []
    for a in parser._actions:
        needed = a.required if a.option_strings else a.nargs not in ("?", "*")
        if a.dest == leave or isinstance(a, argparse._HelpAction) or not needed:
            continue
        value = str(next(iter(a.choices))) if a.choices else next(v for v in _VALUES if _takes(a, v))
        words += [a.option_strings[-1], value] if a.option_strings else [value]
    return words


_VALUES = ("no-such-thing", "1", "8")


def _takes(action: argparse.Action, value: str) -> bool:
    try:
        action.type(value) if callable(action.type) else value
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return False
    return True


@dataclass(frozen=True)
class Option:
    command: tuple[str, ...]
    parser: argparse.ArgumentParser
    flag: str  # what precedes the value: --exclude-out, --fleet.exclude-out, or --fleet-args
    name: str  # the option's own name: exclude_out
    inner: str = ""  # where flag is --STAGE-args: the stage's own option, written inside its string

    def argv(self, value: str) -> list[str]:
        """The command line that gives this option `value`, with what its command requires."""
        given = [self.flag, f"{self.inner} {shlex.quote(value)}"] if self.inner else [self.flag, value]
        leave = self.parser._option_string_actions[self.flag].dest
        return [*self.command, *required(self.parser, leave), *given]

    @property
    def shown(self) -> str:
        """The option as a refusal names it: --fleet-args "--exclude-out ..." is --fleet.exclude-out."""
        return f"--{self.flag[2:].removesuffix('-args')}.{self.inner[2:]}" if self.inner else self.flag

    @property
    def has_out(self) -> bool:
        return any(a.dest == "out" for a in self.parser._actions)


def _stage_parsers() -> dict[str, argparse.ArgumentParser]:
    """Each stage's own options, as --STAGE-args parses them (commands/run.py)."""
    found = {}
    for stage in registry.STAGES:
        parser = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
        stage.add_arguments(parser)
        found[stage.name] = parser
    return found


def options(of: str = "output") -> list[Option]:
    """Every option, in every form, that names a file the command writes (of="output") or takes a URL
    (of="url"), of every command."""
    stages = _stage_parsers()
    found = []
    for words, parser in commands():
        for a in _value_actions(parser):
            name = a.dest.rpartition(".")[2]
            if _kind(a, name) == of:
                found.append(Option(words, parser, a.option_strings[-1], name))
            stage = a.dest.removesuffix("_args")
            if a.dest.endswith("_args") and stage in stages:
                for inner in _value_actions(stages[stage]):
                    inner_name = inner.dest.rpartition(".")[2]
                    if _kind(inner, inner_name) == of:
                        found.append(Option(words, parser, a.option_strings[-1], inner_name,
                                            inner.option_strings[-1]))
    return found


def _kind(action: argparse.Action, name: str) -> str:
    if name in outputs.OUTPUTS:
        return "output"
    if _URL.search(str(action.metavar or "")):
        return "url"
    return ""


def said_to_write(action: argparse.Action) -> bool:
    """An option whose help says it writes or saves a file (other options' names in it aside)."""
    words = re.sub(r"--[\w.-]+", "", action.help or "").lower()
    return action.nargs != 0 and re.search(r"\b(write|save)\b", words) is not None
