"""Typed command-line options, each declared once: values checked as they are parsed, and "not given" kept
apart from 0.

An options record (a dataclass: a stage's, the launch's) declares each option where its field is: the field's
default is the option's, and `option(...)` adds how it is typed and what its help says; `add_options` builds
the parser from that, the help ending with the default as the value says it, so it cannot drift from it.

Every numeric option takes its type and range from here, so a bad value is refused by
argparse in one line before anything runs: a whole number is at most INT64_MAX (what torch and
every reader of run.json hold), a real number or a size is finite, and a list of names refuses an
empty item ("a,,b" is a typo, not two names). Option parsers use `argparse.SUPPRESS` as the
default, so a namespace holds only what the user typed; `given()` turns that into the
keyword arguments of an options record, whose own defaults fill in the rest.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

from clusterbench.secrets import masked

_VALUE_ACTIONS = (None, "store", "append")  # the actions whose option takes a value, and so shows a metavar

_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024**2, "MB": 1024**2,
          "MIB": 1024**2, "G": 1024**3, "GB": 1024**3, "GIB": 1024**3}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
INT64_MAX = 2**63 - 1
_SHOWN = 40  # characters of a bad value an error line repeats


def clipped(text: str) -> str:
    """`text` as an error line repeats it: clipped, so that a line about a damaged value stays short, and
    masked first, since a clipped URL may have lost the @ that marks its password."""
    text = masked(text)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def whole(minimum: int = 1, maximum: int = INT64_MAX) -> Callable[[str], int]:
    """A whole number of at least `minimum` and at most `maximum`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # also a number of more digits than Python converts
            raise argparse.ArgumentTypeError(f"expected a whole number, got {clipped(text)!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {clipped(str(value))}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum}, got {clipped(str(value))}")
        return value
    return parse


def real(minimum: float = 0.0, strict: bool = True, maximum: float = math.inf) -> Callable[[str], float]:
    """A finite number above `minimum` (or at least it, with strict=False) and at most `maximum`."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {clipped(text)!r}") from None
        ok = math.isfinite(value) and (value > minimum if strict else value >= minimum) and value <= maximum
        if not ok:
            bound = f"greater than {minimum:g}" if strict else f"at least {minimum:g}"
            bound += f" and at most {maximum:g}" if maximum < math.inf else ""
            raise argparse.ArgumentTypeError(f"must be a finite number {bound}, got {clipped(text)!r}")
        return value
    return parse


def size(text: str) -> int:
    """'8', '256K', '64M', '1G' (binary units, like nccl-tests) -> bytes, 1 to INT64_MAX."""
    m = _SIZE.match(str(text))
    unit = m.group(2).upper() if m else None
    if not m or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"cannot read {clipped(text)!r} as a size (use e.g. 8, 256K, 64M, 1G)")
    value = float(m.group(1)) * _UNITS[unit]
    if not value < INT64_MAX:  # infinite too, where the digits are more than a float holds
        raise argparse.ArgumentTypeError(f"must be at most {INT64_MAX} bytes, got {clipped(text)!r}")
    if int(value) <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {clipped(text)!r}")
    return int(value)


_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([hdw])\s*$")
_AGE_UNITS = {"h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
MAX_AGE_S = 100 * 365 * 86400.0


def age(text: str) -> float:
    """A period back from now, as history's --since takes it (12h, 30d, 8w), in seconds."""
    match = _AGE.match(text)
    if not match or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{clipped(text)!r} is not a period: give hours, days or weeks, "
                                         "like 12h, 30d or 8w")
    return min(float(match.group(1)) * _AGE_UNITS[match.group(2)], MAX_AGE_S)


def names(text: str, what: str) -> list[str]:
    """A comma-separated list of names, each stripped; an empty one ("a,,b", "a,", "") is refused."""
    items = [t.strip() for t in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"an empty {what} in {clipped(text)!r}: separate names by single commas")
    return items


def auto_or(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """`auto` (None: let the tool choose) or a value `parse` accepts."""
    def parse_auto(text: str) -> Any:
        return None if text.strip().lower() == "auto" else parse(text)
    return parse_auto


def given(args: argparse.Namespace, record: type) -> dict[str, Any]:
    """The options the user typed that belong to `record`, as its keyword arguments."""
    return {f.name: getattr(args, f.name) for f in fields(record) if hasattr(args, f.name)}


class Prefixed:
    """A stage's options under its name, for `run`: what the stage's own command adds as --ops (dest
    ops) becomes --comm.ops (dest "comm.ops"), short forms dropped, in one group per stage."""

    def __init__(self, group: Any, prefix: str) -> None:
        self.group, self.prefix = group, prefix

    def add_argument(self, *flags: str, **kwargs: Any) -> None:
        long = [f for f in flags if f.startswith("--")]
        name = long[0][2:].replace("-", "_")
        dest = kwargs.pop("dest", None) or name
        if kwargs.get("action") in _VALUE_ACTIONS and "choices" not in kwargs:
            kwargs.setdefault("metavar", name.upper())
        self.group.add_argument(*(f"--{self.prefix}.{f[2:]}" for f in long), dest=f"{self.prefix}.{dest}", **kwargs)

    def add_argument_group(self, *args: Any, **kwargs: Any) -> Prefixed:
        return self  # the stage's options stay in its one group


def prefixed(args: argparse.Namespace, prefix: str) -> dict[str, Any]:
    """The options typed under --PREFIX. (dests "PREFIX.name"), as keyword arguments."""
    return {dest.split(".", 1)[1]: value for dest, value in vars(args).items() if dest.startswith(f"{prefix}.")}


FLAG = "flag"  # the key of an option's Flag in its field's metadata


@dataclass(frozen=True)
class Flag:
    """How one field of an options record is typed on the command line."""

    names: tuple[str, ...]  # "-b", "--min-bytes": the long ones give run's --STAGE.option
    help: str
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    action: Any = None
    nargs: str | None = None
    const: Any = None
    metavar: str | None = None
    group: str | None = None  # the help's heading it stands under
    shown: str | None = None  # the default in words, where the value alone does not say it; "": none shown


def option(default: Any, *names: str, help: str, meta: dict[str, Any] | None = None, **how: Any) -> Any:
    """A field of an options record that is also an option: its default, its flags and how they are typed
    (Flag's fields), and the codec's metadata where the record is kept in run.json too."""
    flag = Flag(names, help, **how)
    metadata = {**(meta or {}), FLAG: flag}
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def flag_of(f: Field[Any]) -> Flag | None:
    return f.metadata.get(FLAG)


def add_options(p: Any, record: type, only: tuple[str, ...] | None = None) -> None:
    """Every option of `record` (or those named `only`) on parser `p` (or a group of it, or run's Prefixed), under
    their headings."""
    groups: dict[str, Any] = {}
    for f in fields(record):
        flag = flag_of(f)
        if flag is None or (only is not None and f.name not in only):
            continue
        target = p if flag.group is None else groups.get(flag.group) or groups.setdefault(
            flag.group, p.add_argument_group(flag.group))
        how = {key: value for key in ("type", "choices", "action", "nargs", "const", "metavar")
               if (value := getattr(flag, key)) is not None}
        target.add_argument(*flag.names, dest=f.name, help=_help(flag, f), **how)


def _help(flag: Flag, f: Field[Any]) -> str:
    default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
    shown = flag.shown if flag.shown is not None else _shown(default, flag)
    if not shown:
        return flag.help
    # One parenthesis, not two side by side, where the help ends in one of its own.
    return f"{flag.help[:-1]}; default {shown})" if flag.help.endswith(")") else f"{flag.help} (default {shown})"


def _shown(value: Any, flag: Flag) -> str:
    """A default as the help says it: on or off, a list as it is typed, a number as short as it reads."""
    if flag.action == "store_true" or value is None:
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
