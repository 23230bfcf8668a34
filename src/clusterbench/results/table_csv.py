"""A run folder's CSV tables read back as their records.

telemetry.csv is the only record of its samples. The other tables are run.json's too, but each row
reaches its CSV the moment it is measured, while run.json follows a hot loop only every so often
(results/folder.py): a run whose rank 0 was killed between two saves holds its last rows in the CSVs
alone, and reading them back is how those rows reach run.json, the report and the store.
"""

from __future__ import annotations

import csv
import io
import math
import types
import typing
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar, Union

from clusterbench.errors import UsageError
from clusterbench.inputs import files
from clusterbench.results import codec

T = TypeVar("T")


def read_rows(path: Path, record: type[T], limit: int = files.DOCUMENT_LIMIT) -> list[T]:
    """<table>.csv as `record`s; ValueError naming the file (and the line) for one that is not: not a
    regular file, too large, other columns, a row that does not fit, a number not finite."""
    try:
        text = files.read_text(path, str(path), limit)
    except UsageError as e:
        raise ValueError(str(e)) from None
    # Rows reach the file whole, one write each: a last line without its newline is a write a killed run
    # never finished, not a row.
    text = text[:text.rfind("\n") + 1]
    hints = typing.get_type_hints(record)
    columns = {f.name for f in fields(record)}  # type: ignore[arg-type]
    rows, line = [], 1
    try:
        reader = csv.reader(io.StringIO(text, newline=""))
        header = next(reader, [])
        if set(header) != columns or len(header) != len(columns):
            raise codec.SchemaError("", f"the cells are not {path.name}'s columns")
        cells = [_converter(name, hints[name]) for name in header]  # each column's, chosen once
        for line, row in enumerate(reader, 2):
            if len(row) != len(header):
                raise codec.SchemaError("", f"the cells are not {path.name}'s columns")
            rows.append(codec.load(record, {name: cell(v) for name, cell, v in zip(header, cells, row)}))
    except (codec.SchemaError, ValueError, csv.Error) as e:
        raise ValueError(f"{path} line {line}: {e}") from None
    return rows


def _converter(name: str, tp: Any) -> Callable[[str], object]:
    """How a column's cells read as the JSON values codec expects of `tp`: csv wrote None as an empty cell and
    bools as True/False, and Python's float text reads back to the same float."""
    options = typing.get_args(tp) if typing.get_origin(tp) in (Union, types.UnionType) else (tp,)
    optional = type(None) in options
    kind = next(t for t in options if t is not type(None))

    def cell(text: str) -> object:
        if text == "" and optional:
            return None
        if kind is bool:
            return {"True": True, "False": False}.get(text, text)
        if kind is int:
            return int(text)
        if kind is float:
            value = float(text)
            if not math.isfinite(value):
                raise ValueError(f"{name} is {text}, not a finite number")
            return value
        return text
    return cell
