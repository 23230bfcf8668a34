"""Typed records to JSON and back, checking every field on the way in.

The schema is plain dataclasses with type hints; this module is the only code that turns
them into JSON values and JSON values into them. Reading checks each value against its
field's type (and a `min` in the field's metadata) and refuses fields the schema does not
have, so a document that has the right shape but wrong contents is refused at the boundary
with the path of the field at fault, instead of failing later in code that formats or
divides it.

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
        item = typing.get_args(tp)[0] if typing.get_args(tp) else Any
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
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
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
        low = f.metadata.get("min")
        if low is not None and isinstance(loaded, (int, float)) and not loaded >= low:
            raise SchemaError(path, f"must be at least {low:g}, got {loaded:g}")
        kwargs[f.name] = loaded
    return cls(**kwargs)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _show(value: Any) -> str:
    if value is None:
        return "null"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
