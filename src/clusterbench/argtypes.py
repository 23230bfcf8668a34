"""Typed command-line options: values checked as they are parsed, and "not given" kept apart from 0.

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
from dataclasses import fields
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
