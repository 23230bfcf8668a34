"""Message sizes: the geometric sweep, rounding a size to whole elements, and the check's chunks."""

from __future__ import annotations

from clusterbench.errors import UsageError

CHUNK = 1 << 20  # elements the check builds at a time: each int64 temporary of a chunk is 8 MiB
SCRATCH_BYTES = 12 * 8 * CHUNK  # the most the temporaries of one chunk take at once (measured: ~95 MiB)


def geometric(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
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
