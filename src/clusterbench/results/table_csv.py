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
        for line, row in enumerate(csv.DictReader(io.StringIO(text, newline="")), 2):
            if set(row) != columns or None in row.values():  # DictReader fills a short row's cells with None
                raise codec.SchemaError("", f"the cells are not {path.name}'s columns")
            rows.append(codec.load(record, {k: _cell(k, hints[k], v) for k, v in row.items()}))
    except (codec.SchemaError, ValueError, csv.Error) as e:
        raise ValueError(f"{path} line {line}: {e}") from None
    return rows


def _cell(name: str, tp: Any, text: str) -> object:
    """A cell as the JSON value codec expects of `tp`: csv wrote None as an empty cell and bools as
    True/False, and Python's float text reads back to the same float."""
    options = typing.get_args(tp) if typing.get_origin(tp) in (Union, types.UnionType) else (tp,)
    if text == "" and type(None) in options:
        return None
    kind = next(t for t in options if t is not type(None))
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
