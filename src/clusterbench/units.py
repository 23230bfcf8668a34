"""How figures are written for people: sizes, durations and bandwidth units, the same everywhere."""

from __future__ import annotations

from collections.abc import Collection

# The table's unit choices: label and the factor from Gbps (bits) to it.
BANDWIDTH_UNITS = {"Gbps": ("Gbps", 1.0), "GBps": ("GB/s", 1 / 8)}
BITS_PER_BYTE = 8


def human_bytes(nbytes: float, digits: int = 4) -> str:
    """Binary units like nccl-tests' sizes: 8 B, 1 KiB, 64 MiB, 1.5 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(nbytes) < 1024:
            return f"{nbytes:g} B" if unit == "B" else f"{nbytes:.{digits}g} {unit}"
        nbytes /= 1024
    return f"{nbytes:.{digits}g} TiB"


def gib(nbytes: int | None) -> str:
    """Bytes as GiB with one decimal, "-" when unknown."""
    return "-" if nbytes is None else f"{nbytes / 2**30:.1f} GiB"


def duration(us: float) -> str:
    if us < 1000:
        return f"{us:.2f} us"
    if us < 1e6:
        return f"{us / 1e3:.3f} ms"
    return f"{us / 1e6:.3f} s"


def bandwidth(gbps: float, unit: str) -> str:
    """A figure stored in Gbps, written in `unit` (one of BANDWIDTH_UNITS)."""
    return f"{gbps * BANDWIDTH_UNITS[unit][1]:.3f}"


def ranks_text(ranks: Collection[int]) -> str:
    """0,1,2,5 -> "ranks 0-2, 5", in one pass over the numbers: a default group holds up to a million."""
    spans: list[list[int]] = []
    for r in sorted(ranks):
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(lo) if lo == hi else f"{lo}-{hi}"
                                                                  for lo, hi in spans)
