"""Slurm's compressed host lists, both ways: "gpu[01-03,07],login1" <-> gpu01 gpu02 gpu03 gpu07 login1.

What `srun` tells its tasks is read with expand(); the nodes a fleet run takes out are written with
compress(), which `--exclude=` and `scontrol ... nodename=` take as they are.

A list is read as Slurm's hostlist.c reads it: names separated by commas, each a prefix and any number
of bracketed groups of numbers and ranges ("rack[1-2]-gpu[01-04]" is every rack's every gpu, the first
group outermost), a range's numbers as wide as its first is written ("n[8-10]": n8 n9 n10; "n[08-10]":
n08 n09 n10). Anything else (a range that runs backwards or is not numbers, a bracket never closed or
never opened, brackets inside brackets, a name left empty between commas, no name at all) is a
ValueError saying "malformed host list" and naming the list. How many hosts a list names is counted
from its ranges before any name is made, so a list past MAX_HOSTS is refused at once, however many
millions it would unfold into.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from clusterbench.argtypes import clipped

# Slurm itself refuses a range of more than 64K hosts (hostlist.c, MAX_RANGE "anything larger will be
# assumed to be an error"); the largest Slurm clusters have a few tens of thousands of nodes. So a whole
# list of more is a typo or damage, and 65,536 names cost clusterbench a few tens of milliseconds.
MAX_HOSTS = 64 * 1024
# No host is numbered with more digits; int() is never asked to read thousands of them.
_MAX_DIGITS = 18

_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_BREAK = re.compile(r"[\[\],]")  # what splits a list: brackets and the commas outside them
_SPACE = re.compile(r"\s")
# A name that ends in digits has them as its index: gpu-03 -> ("gpu-", "03"); the digits of
# "rack2-node05" before the last run are prefix. Slurm writes brackets only at the end of a name,
# so node7.cluster stands as it is.
_INDEXED = re.compile(r"(.*?)([0-9]+)")


@dataclass(frozen=True)
class _Span:
    lo: int
    hi: int
    width: int  # digits of each name, zero-padded: how wide Slurm's first number of the range was written

    def names(self) -> list[str]:
        return [f"{i:0{self.width}d}" for i in range(self.lo, self.hi + 1)]


_Part = str | tuple[_Span, ...]  # a name's literal text, or one bracketed group of ranges


def count(text: str) -> int:
    """How many hosts `text` names (duplicates counted, as Slurm counts them), from its ranges alone:
    nothing is expanded. A list that is not one is a ValueError."""
    return sum(_count(parts) for parts in _parse(text))


def expand(text: str) -> list[str]:
    """The hosts of a compressed list, in its order. A malformed list, or one of more than MAX_HOSTS
    hosts, is a ValueError naming it."""
    names = _parse(text)
    total = sum(_count(parts) for parts in names)
    if total > MAX_HOSTS:
        raise ValueError(f"host list {clipped(text)!r} names {_amount(total)} hosts, more than the {MAX_HOSTS} "
                         "clusterbench reads (Slurm's own limit for a range): a range is mistyped")
    return [host for parts in names for host in _names(parts)]


def _amount(total: int) -> str:
    return str(total) if total < 10**12 else "more than 10^12"


def _malformed(text: str, why: str) -> ValueError:
    return ValueError(f"malformed host list {clipped(text)!r}: {why}")


def _parse(shown: str) -> list[list[_Part]]:
    """Each name of the list as its parts, or a ValueError saying what is wrong."""
    text = shown.strip()
    if not text:
        raise _malformed(shown, "it names no host")
    names: list[list[_Part]] = []
    parts: list[_Part] = []
    start, inside = 0, False
    for mark in _BREAK.finditer(text):
        at, char = mark.start(), mark.group()
        if char == "[":
            if inside:
                raise _malformed(text, f"a '[' inside brackets at character {at + 1}")
            _literal(text, text[start:at], parts)
            inside, start = True, at + 1
        elif char == "]":
            if not inside:
                raise _malformed(text, f"a ']' with no '[' before it at character {at + 1}")
            parts.append(_group(text, text[start:at]))
            inside, start = False, at + 1
        elif not inside:  # a comma between names (one inside brackets separates ranges)
            _literal(text, text[start:at], parts)
            names.append(_whole(text, parts))
            parts, start = [], at + 1
    if inside:
        raise _malformed(text, "a '[' that is never closed")
    _literal(text, text[start:], parts)
    names.append(_whole(text, parts))
    return names


def _literal(text: str, piece: str, parts: list[_Part]) -> None:
    if _SPACE.search(piece):
        raise _malformed(text, f"whitespace inside the name {clipped(piece.strip())!r}")
    if not piece.isprintable():  # a control character: no host's name, and a line of its own when printed
        raise _malformed(text, f"a character that is not printable in the name {clipped(piece)!r}")
    if piece:
        parts.append(piece)


def _whole(text: str, parts: list[_Part]) -> list[_Part]:
    if not parts:
        raise _malformed(text, "an empty name between commas")
    return parts


def _group(text: str, inside: str) -> tuple[_Span, ...]:
    if not inside:
        raise _malformed(text, "empty brackets []")
    return tuple(_span(text, part) for part in inside.split(","))


def _span(text: str, part: str) -> _Span:
    match = _RANGE.fullmatch(part)
    if not part:
        raise _malformed(text, "an empty range between commas")
    if match is None:
        raise _malformed(text, f"the range {clipped(part)!r} is not a number or two joined by '-'")
    lo, hi = match[1], match[2] or match[1]
    if len(lo) > _MAX_DIGITS or len(hi) > _MAX_DIGITS:
        raise _malformed(text, f"the range {clipped(part)!r} has a host number of more than {_MAX_DIGITS} digits")
    if int(hi) < int(lo):
        raise _malformed(text, f"the range {part} runs backwards")
    return _Span(int(lo), int(hi), len(lo))


def _count(parts: list[_Part]) -> int:
    total = 1
    for part in parts:
        if not isinstance(part, str):
            total *= sum(span.hi - span.lo + 1 for span in part)
    return total


def _names(parts: list[_Part]) -> list[str]:
    pools = [[part] if isinstance(part, str) else [n for span in part for n in span.names()] for part in parts]
    return ["".join(combo) for combo in itertools.product(*pools)]


def compress(hosts: list[str]) -> str:
    """The shortest usual form of `hosts` (sorted, duplicates dropped): names that differ only in
    their last number, written with as many digits, share brackets; any other name stands as it is."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for host in sorted(set(hosts)):
        match = _INDEXED.fullmatch(host)
        if match is None or "[" in host or "]" in host or "," in host:
            plain.append(host)
            continue
        prefix, digits = match.groups()
        # "07" and "7" are different hosts: only numbers of one width share a bracket, padded to it.
        groups.setdefault((prefix, len(digits)), []).append(int(digits))
    parts = [_bracket(prefix, sorted(numbers), width) for (prefix, width), numbers in groups.items()]
    return ",".join(sorted(parts + plain))


def _bracket(prefix: str, numbers: list[int], width: int) -> str:
    def name(i: int) -> str:
        return f"{i:0{width}d}"

    if len(numbers) == 1:
        return f"{prefix}{name(numbers[0])}"
    spans: list[list[int]] = []
    for i in numbers:
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    inside = ",".join(name(lo) if lo == hi else f"{name(lo)}-{name(hi)}" for lo, hi in spans)
    return f"{prefix}[{inside}]"
