"""A run as the store may keep it, checked before anything of it is written: every name by the one rule its
readers read by (values.unfit), every instant a run folder's stamp, every figure a finite number. A store
clusterbench wrote never holds what its own readers would call damaged; what a run cannot be recorded as is
said in one line naming the field, and nothing of it is written."""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import Column

from clusterbench.argtypes import clipped
from clusterbench.store.record import RunRecord
from clusterbench.store.schema import figures, nodes, runs
from clusterbench.store.values import STAMP, unfit


def _said(column: Column, value: Any, why: str) -> str:
    return f"{column.table.name}.{column.name} would hold {clipped(repr(value))}, {why}"


def _names(record: RunRecord) -> list[tuple[Any, Column]]:
    """Every name of the record with the column it goes to: those that may be empty only where they are not."""
    r = runs.c
    found = [(record.uid, r.uid), (record.command, r.command), (record.status, r.status), (record.host, r.host)]
    found += [(value, column) for value, column in ((record.verdict, r.verdict), (record.folder, r.folder))
              if value is not None]
    for f in record.figures:
        found += [(f.node, figures.c.node), (f.device, figures.c.device), (f.metric, figures.c.metric),
                  (f.klass, figures.c.klass)]
    for node, verdict in record.node_verdicts.items():
        found += [(node, nodes.c.node), (verdict, nodes.c.verdict)]
    for node, klass in record.node_classes.items():
        found += [(node, nodes.c.node), (klass, nodes.c.klass)]
    return found


def refusal(record: RunRecord) -> str | None:
    """Why `record` cannot be stored as it is, naming the field; None where it can."""
    for value, column in _names(record):
        why = unfit(value, column)
        if why is not None:
            return _said(column, value, why)
    for value, column in ((record.started_utc, runs.c.started_utc), (record.finished_utc, runs.c.finished_utc)):
        if (value is not None or column is runs.c.started_utc) and not (isinstance(value, str)
                                                                        and STAMP.fullmatch(value)):
            return _said(column, value, "not a UTC time like 20260101T000000Z")
    for f in record.figures:
        if isinstance(f.value, bool) or not isinstance(f.value, (int, float)) or not math.isfinite(f.value):
            return _said(figures.c.value, f.value, f"not a finite number (metric {clipped(f.metric)})")
    return None
