"""Typed records to JSON and back, checking every field on the way in.

The schema is plain dataclasses with type hints; this module is the only code that turns
them into JSON values and JSON values into them. Reading checks each value against its
field's type and the bounds in the field's metadata (`bounds`: what a measurement of that kind
can be), runs a record's own check of how its fields agree (a `__post_init__` that raises
ValueError), and refuses fields the schema does not have, so a document that has the right
shape but wrong contents is refused at the boundary with the path of the field at fault,
instead of failing later in code that formats, fits or divides it.

JSON is written strictly: a float that is not finite (a NaN loss) becomes null, so jq,
JavaScript and pandas read every file; fields that may hold such a value are typed
`float | None`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

_EXACT = 2**53  # the largest whole number every float up to it holds exactly
_BOUNDS = ("min", "above", "max")


def bounds(low: float | None = None, high: float | None = None, *, above: float | None = None,
           zero: bool = False) -> dict[str, Any]:
    """Field metadata: the value (or each value of a list, tuple or mapping) is at least `low` ("min"),
    more than `above`, at most `high` ("max"); `zero` also accepts exactly 0 (a clock that did not tick)."""
    given = {"min": low, "above": above, "max": high, "zero": zero or None}
    return {key: value for key, value in given.items() if value is not None}


# What a measurement can be. No clock clusterbench reads ticks finer than a nanosecond and nothing it
# times runs for a year; a mean or a quantile of many ticks can be finer than one, so a time starts
# at a femtosecond. Past these a figure (a duration of 1e-300 or 1e300 s) is a damaged file, not a reading.
YEAR_S = 365.25 * 24 * 3600
SECONDS = bounds(1e-15, YEAR_S)
ELAPSED_S = bounds(1e-15, YEAR_S, zero=True)  # a step or a timed window: 0 when nothing was timed
MICROSECONDS = bounds(1e-9, YEAR_S * 1e6)
TICKS_US = bounds(1e-9, YEAR_S * 1e6, zero=True)  # a quantile of calls' times: 0 when the clock did not tick
NONNEGATIVE = bounds(0)  # counts of what went wrong, tokens, rates, errors, spreads
AT_LEAST_ONE = bounds(1)  # ranks, steps, iterations, points: something was there
MESSAGE_BYTES = bounds(1, 2**50)  # a message holds a byte at least; no device holds a pebibyte
POSITIVE = bounds(above=0)  # a learning rate, a sampling rate, a peak


class SchemaError(ValueError):
    """A value that does not fit its field: `where` is the field's path, e.g. comm[3].busbw_gbps."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where or 'the document'}: {message}")
        self.where = where


def dump(value: Any) -> Any:
    """A record (or any value inside one) as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: dump(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [dump(v) for v in value]
    if isinstance(value, dict):
        return {str(k): dump(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def load(tp: Any, value: Any, where: str = "") -> Any:
    """`value` (parsed JSON) as type `tp`, or SchemaError naming the first field that does not fit."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        return _union(typing.get_args(tp), value, where)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise SchemaError(where, f"expected one of {', '.join(map(repr, allowed))}, got {_show(value)}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise SchemaError(where, f"expected a list, got {_show(value)}")
        args = typing.get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:  # tuple[int, int]: that many, each its type
            if len(value) != len(args):
                raise SchemaError(where, f"expected a list of {len(args)} values, got {len(value)}")
            return tuple(load(t, v, f"{where}[{i}]") for i, (t, v) in enumerate(zip(args, value)))
        item = args[0] if args else Any
        items = [load(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise SchemaError(where, f"expected an object, got {_show(value)}")
        item = typing.get_args(tp)[1]
        return {k: load(item, v, f"{where}.{k}" if where else k) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return _record(tp, value, where)
    return _scalar(tp, value, where)


def _union(options: tuple[Any, ...], value: Any, where: str) -> Any:
    if value is None:
        if type(None) in options:
            return None
        raise SchemaError(where, "expected a value, got null")
    real = [o for o in options if o is not type(None)]
    if len(real) == 1:
        return load(real[0], value, where)
    for option in real:
        try:
            return load(option, value, where)
        except SchemaError:
            continue
    raise SchemaError(where, f"no type fits {_show(value)}")


def _scalar(tp: Any, value: Any, where: str) -> Any:
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SchemaError(where, f"expected a number, got {_show(value)}")
        if not math.isfinite(value):
            raise SchemaError(where, f"{value} is not a finite number")
        return float(value)
    if tp is int:
        # 3.0 is a whole number as JSON writers outside Python spell it; past 2**53 a float is not exact.
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer()
                                                                       and abs(value) <= _EXACT)):
            raise SchemaError(where, f"expected a whole number, got {_show(value)}")
        return int(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise SchemaError(where, f"expected true or false, got {_show(value)}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise SchemaError(where, f"expected text, got {_show(value)}")
        return value
    raise TypeError(f"the schema uses a type the codec does not know: {tp!r}")


def _record(cls: type, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise SchemaError(where, f"expected an object, got {_show(value)}")
    hints = _hints(cls)
    unknown = sorted(set(value) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise SchemaError(f"{where}.{unknown[0]}" if where else unknown[0], "unknown field (from another version?)")
    kwargs = {}
    for f in dataclasses.fields(cls):
        path = f"{where}.{f.name}" if where else f.name
        if f.name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise SchemaError(path, "missing")
            continue
        loaded = load(hints[f.name], value[f.name], path)
        if any(key in f.metadata for key in _BOUNDS):
            _check_bounds(f.metadata, loaded, path)
        kwargs[f.name] = loaded
    try:
        return cls(**kwargs)
    except ValueError as e:  # the record's own check: fields that cannot all be true at once
        raise SchemaError(where, str(e)) from None


def _check_bounds(meta: Any, value: Any, where: str) -> None:
    if isinstance(value, (list, tuple)):
        items = [(f"{where}[{i}]", v) for i, v in enumerate(value)]
    elif isinstance(value, dict):
        items = [(f"{where}.{k}", v) for k, v in value.items()]
    else:
        items = [(where, value)]
    low, above, high = (meta.get(key) for key in _BOUNDS)
    for path, v in items:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (meta.get("zero") and v == 0):
            continue
        if (low is not None and not v >= low) or (above is not None and not v > above) or \
                (high is not None and not v <= high):
            raise SchemaError(path, f"must be {_range_text(meta)}, got {v:g}")


def _range_text(meta: Any) -> str:
    words = {"min": "at least", "above": "more than", "max": "at most"}
    text = " and ".join(f"{words[key]} {meta[key]:g}" for key in _BOUNDS if key in meta)
    return f"0 or {text}" if meta.get("zero") else text


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _show(value: Any) -> str:
    if value is None:
        return "null"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
