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
from collections.abc import Callable
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


_PLAIN = frozenset((str, int, bool, type(None)))  # JSON's own values, written as they are


def dump(value: Any) -> Any:
    """A record (or any value inside one) as plain JSON values."""
    # A fleet's run.json holds millions of values: plain ones are passed through without a call.
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is list or kind is tuple:
        return [v if type(v) in _PLAIN else dump(v) for v in value]
    if kind is dict:
        return {str(k): v if type(v) in _PLAIN else dump(v) for k, v in value.items()}
    names = _dumped_fields(kind)
    if names is not None:
        out = {}
        for name in names:
            v = getattr(value, name)
            out[name] = v if type(v) in _PLAIN else dump(v)
        return out
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [dump(v) for v in value]
    if isinstance(value, dict):
        return {str(k): dump(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


@functools.cache
def _dumped_fields(kind: type) -> tuple[str, ...] | None:
    """A record type's fields as run.json holds them; None for any other type."""
    if not dataclasses.is_dataclass(kind):
        return None
    return tuple(f.name for f in dataclasses.fields(kind))


def load(tp: Any, value: Any, where: str = "") -> Any:
    """`value` (parsed JSON) as type `tp`, or SchemaError naming the first field that does not fit."""
    try:
        return _loader(tp)(value)
    except _Fault as fault:
        raise SchemaError(_joined(where, reversed(fault.steps)), fault.message) from None


class _Fault(Exception):
    """A value that does not fit, on its way out of the loaders: each container it passes adds its step
    (a field or key name, or a list index), so that the path is written only for a value refused."""

    def __init__(self, message: str, *steps: str | int) -> None:
        super().__init__(message)
        self.message, self.steps = message, list(steps)


def _joined(where: str, steps: Any) -> str:
    for step in steps:
        where = f"{where}[{step}]" if isinstance(step, int) else f"{where}.{step}" if where else step
    return where


def _at(step: str | int, load_item: Callable[[Any], Any], value: Any) -> Any:
    try:
        return load_item(value)
    except _Fault as fault:
        fault.steps.append(step)
        raise


@functools.cache
def _loader(tp: Any) -> Callable[[Any], Any]:
    """The function that loads a value of type `tp`: built once per type, so that a run.json of a million
    values is not a million lookups of its type's shape."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return lambda value: value
    if origin in (Union, types.UnionType):
        return _union_loader(typing.get_args(tp))
    if origin is Literal:
        allowed = typing.get_args(tp)

        def literal(value: Any) -> Any:
            if value not in allowed:
                raise _Fault(f"expected one of {', '.join(map(repr, allowed))}, got {_show(value)}")
            return value
        return literal
    if origin in (list, tuple):
        return _sequence_loader(origin, typing.get_args(tp))
    if origin is dict:
        item = _loader(typing.get_args(tp)[1])

        def mapping(value: Any) -> Any:
            if not isinstance(value, dict):
                raise _Fault(f"expected an object, got {_show(value)}")
            out = {}
            for k, v in value.items():
                try:
                    out[k] = item(v)
                except _Fault as fault:
                    fault.steps.append(k)
                    raise
            return out
        return mapping
    if dataclasses.is_dataclass(tp):
        return _record_loader(tp)
    return _scalar_loader(tp)


def _union_loader(options: tuple[Any, ...]) -> Callable[[Any], Any]:
    optional = type(None) in options
    real = [_loader(o) for o in options if o is not type(None)]

    def union(value: Any) -> Any:
        if value is None:
            if optional:
                return None
            raise _Fault("expected a value, got null")
        if len(real) == 1:
            return real[0](value)
        for option in real:
            try:
                return option(value)
            except _Fault:
                continue
        raise _Fault(f"no type fits {_show(value)}")
    return union


def _sequence_loader(origin: Any, args: tuple[Any, ...]) -> Callable[[Any], Any]:
    if origin is tuple and args and args[-1] is not Ellipsis:  # tuple[int, int]: that many, each its type
        loaders = [_loader(t) for t in args]

        def fixed(value: Any) -> Any:
            if not isinstance(value, list):
                raise _Fault(f"expected a list, got {_show(value)}")
            if len(value) != len(loaders):
                raise _Fault(f"expected a list of {len(loaders)} values, got {len(value)}")
            return tuple(_at(i, f, v) for i, (f, v) in enumerate(zip(loaders, value)))
        return fixed
    item = _loader(args[0] if args else Any)

    def sequence(value: Any) -> Any:
        if not isinstance(value, list):
            raise _Fault(f"expected a list, got {_show(value)}")
        try:
            items = [item(v) for v in value]
        except _Fault as fault:  # which item: found again, only now that one failed
            for i, v in enumerate(value):
                try:
                    item(v)
                except _Fault:
                    fault.steps.append(i)
                    break
            raise
        return tuple(items) if origin is tuple else items
    return sequence


def _scalar_loader(tp: Any) -> Callable[[Any], Any]:
    if tp is float:
        def real(value: Any) -> float:
            if type(value) is float:
                if not math.isfinite(value):
                    raise _Fault(f"{value} is not a finite number")
                return value
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise _Fault(f"expected a number, got {_show(value)}")
            if not math.isfinite(value):
                raise _Fault(f"{value} is not a finite number")
            return float(value)
        return real
    if tp is int:
        def whole(value: Any) -> int:
            # 3.0 is a whole number as JSON writers outside Python spell it; past 2**53 a float is not exact.
            if type(value) is int:
                return value
            if isinstance(value, bool) or not (isinstance(value, int) or (
                    isinstance(value, float) and value.is_integer() and abs(value) <= _EXACT)):
                raise _Fault(f"expected a whole number, got {_show(value)}")
            return int(value)
        return whole
    if tp is bool:
        def truth(value: Any) -> bool:
            if not isinstance(value, bool):
                raise _Fault(f"expected true or false, got {_show(value)}")
            return value
        return truth
    if tp is str:
        def text(value: Any) -> str:
            if not isinstance(value, str):
                raise _Fault(f"expected text, got {_show(value)}")
            return value
        return text
    raise TypeError(f"the schema uses a type the codec does not know: {tp!r}")


def _record_loader(cls: type) -> Callable[[Any], Any]:
    hints = typing.get_type_hints(cls)
    fields = [(f.name, f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
               f.metadata if any(key in f.metadata for key in _BOUNDS) else None) for f in dataclasses.fields(cls)]
    names = {name for name, _, _ in fields}
    loaders = {name: _loader(hints[name]) for name in names}

    def record(value: Any) -> Any:
        if not isinstance(value, dict):
            raise _Fault(f"expected an object, got {_show(value)}")
        if not value.keys() <= names:
            raise _Fault("unknown field (from another version?)", min(set(value) - names))
        kwargs = {}
        for name, required, meta in fields:
            if name not in value:
                if required:
                    raise _Fault("missing", name)
                continue
            try:
                loaded = loaders[name](value[name])
                if meta is not None:
                    _check_bounds(meta, loaded)
            except _Fault as fault:
                fault.steps.append(name)
                raise
            kwargs[name] = loaded
        try:
            return cls(**kwargs)
        except ValueError as e:  # the record's own check: fields that cannot all be true at once
            raise _Fault(str(e)) from None
    return record


def _check_bounds(meta: Any, value: Any) -> None:
    if isinstance(value, (list, tuple)):
        items: Any = enumerate(value)
    elif isinstance(value, dict):
        items = value.items()
    else:
        items = [(None, value)]
    low, above, high = (meta.get(key) for key in _BOUNDS)
    for step, v in items:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (meta.get("zero") and v == 0):
            continue
        if (low is not None and not v >= low) or (above is not None and not v > above) or \
                (high is not None and not v <= high):
            raise _Fault(f"must be {_range_text(meta)}, got {v:g}", *([] if step is None else [step]))


def _range_text(meta: Any) -> str:
    words = {"min": "at least", "above": "more than", "max": "at most"}
    text = " and ".join(f"{words[key]} {meta[key]:g}" for key in _BOUNDS if key in meta)
    return f"0 or {text}" if meta.get("zero") else text


def _show(value: Any) -> str:
    if value is None:
        return "null"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
