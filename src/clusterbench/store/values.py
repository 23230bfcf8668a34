"""Every value read from the store checked as it is read, as a run folder's are: SQLite keeps whatever a
column is given (text in a REAL column, a number in a TEXT one), and a store may have been edited, copied
half or written by something else. A value no clusterbench wrote is a Damaged naming its table and
column, which the store turns into one line (db.Store)."""

from __future__ import annotations

import math
import re
from typing import Any

from sqlalchemy import Column, ColumnElement, func, or_

from clusterbench.argtypes import clipped

STAMP = re.compile(r"\d{8}T\d{6}Z")  # a run folder's UTC stamp, as runs.started_utc holds it
# The largest finite double: SQLite has no isfinite, but an infinity compares above it.
_FINITE = 1.7976931348623157e308


class Damaged(Exception):
    """A value the store holds, or lacks, that clusterbench never leaves there: one line, naming where."""


def held(column: Column, value: Any, why: str) -> Damaged:
    return Damaged(f"damaged: {column.table.name}.{column.name} holds {clipped(repr(value))} ({why})")


def number(value: Any, column: Column) -> float:
    """A finite number: what every figure and every instant in seconds is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise held(column, value, "not a number")
    if not math.isfinite(value):
        raise held(column, value, "not finite")
    return float(value)


def unfit(value: Any, column: Column) -> str | None:
    """Why `value` is no text the store keeps in `column`, or None: the one rule of what a name may be, which
    writers apply before they record and readers as they read. Printable text (a tab, a newline, an escape, a
    non-breaking space, an undecodable byte of a file name would rewrite the terminal's lines, forge one, or
    look like what it is not), within the column's length (PostgreSQL holds a column to it)."""
    if not isinstance(value, str):
        return "not text"
    if not value.isprintable():
        return "not printable text"
    limit = getattr(column.type, "length", None)
    if limit is not None and len(value) > limit:
        return f"longer than {limit} characters"
    return None


def text(value: Any, column: Column, nullable: bool = False) -> Any:
    """A name: text (None where the column may be empty)."""
    if value is None and nullable:
        return None
    why = unfit(value, column)
    if why is not None:
        raise held(column, value, why)
    return value


def stamp(value: Any, column: Column, nullable: bool = False) -> Any:
    """A UTC stamp of a run folder's form, 20261202T061500Z."""
    if value is None and nullable:
        return None
    if not isinstance(value, str) or not STAMP.fullmatch(value):
        raise held(column, value, "not a UTC time like 20260101T000000Z")
    return value


def count(value: Any, column: Column) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise held(column, value, "not a count")
    return value


def unsound(column: Column, dialect: str) -> ColumnElement[bool]:
    """Where a REAL column holds what `number` refuses, in the database's own terms: what a question that
    sums or averages in the database asks first, since SQL's avg takes text for 0."""
    if dialect == "sqlite":  # typeof is 'null' for NULL; an infinity compares past the largest double
        return or_(func.typeof(column).not_in(["integer", "real"]), column > _FINITE, column < -_FINITE)
    return or_(column.is_(None), column.in_([math.nan, math.inf, -math.inf]))
