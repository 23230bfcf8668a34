"""A user's regular expression, matched with a bound on its cost.

Python's `re` backtracks without limit: `(.|.)*X` against a 40-character metric name takes
longer than the universe has left. Patterns are compiled and matched with the `regex` engine,
whose matches take a timeout; one that runs out is refused in one line, naming the pattern.
"""

from __future__ import annotations

from typing import Any

import regex

from clusterbench.errors import UsageError

# A metric name is under a hundred characters: an honest pattern matches it in microseconds.
MATCH_TIMEOUT_S = 0.2


def compile_pattern(text: str, label: str) -> Any:
    """The compiled pattern, or a one-line UsageError saying why it is not one."""
    try:
        return regex.compile(text, flags=regex.VERSION0)
    except (regex.error, ValueError, RecursionError, OverflowError) as e:
        raise UsageError(f"{label}: {text!r} is not a regular expression ({e})") from None


def fullmatch(pattern: Any, name: str, label: str) -> bool:
    """Whether `pattern` matches all of `name`; a match that runs past its bound is refused."""
    try:
        return pattern.fullmatch(name, timeout=MATCH_TIMEOUT_S) is not None
    except TimeoutError:
        raise UsageError(f"{label}: the pattern {pattern.pattern!r} takes too long to match (it backtracks "
                         "without bound): write it without nested or overlapping repeats") from None
