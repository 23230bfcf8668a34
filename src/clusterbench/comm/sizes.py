"""Parsing message sizes and building the sweep."""

from __future__ import annotations

import re

from clusterbench.errors import UsageError

_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024**2, "MB": 1024**2,
          "MIB": 1024**2, "G": 1024**3, "GB": 1024**3, "GIB": 1024**3}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str, what: str = "size") -> int:
    """'8', '256K', '64M', '1G' (binary units, like nccl-tests) -> bytes."""
    m = _SIZE.match(str(text))
    unit = m.group(2).upper() if m else None
    if not m or unit not in _UNITS:
        raise UsageError(f"{what}: cannot read {text!r} as a size (use e.g. 8, 256K, 64M, 1G)")
    value = int(float(m.group(1)) * _UNITS[unit])
    if value <= 0:
        raise UsageError(f"{what} must be positive, got {text!r}")
    return value


def sweep(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """Geometric sizes min, min*f, ... up to max (max itself included when the steps miss it)."""
    if min_bytes > max_bytes:
        raise UsageError(f"--min-bytes ({min_bytes}) is larger than --max-bytes ({max_bytes})")
    if not factor > 1:
        raise UsageError(f"--step-factor must be greater than 1, got {factor:g}")
    sizes, s = [], float(min_bytes)
    while s <= max_bytes * (1 + 1e-9):
        sizes.append(round(s))
        s *= factor
    if sizes[-1] != max_bytes:
        sizes.append(max_bytes)
    return sorted(set(sizes))


def count_for(size_bytes: int, elem_bytes: int, granularity: int) -> int:
    """Whole elements, a multiple of `granularity`, at least one granule."""
    count = size_bytes // elem_bytes
    return max(granularity, count - count % granularity)


def human(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:g} {unit}" if unit == "B" else f"{nbytes:.4g} {unit}"
        nbytes /= 1024
    return f"{nbytes} B"
