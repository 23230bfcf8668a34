"""The printed comm table: Size (Bytes) | Description | Duration | Throughput | BusBW | #wrong."""

from __future__ import annotations

from clusterbench.results.schema import CommRow
from clusterbench.units import BANDWIDTH_UNITS, bandwidth, duration

_WIDTHS = (14, 30, 12, 18, 14, 8)


def _fmt(cells: tuple) -> str:
    return "  ".join(
        str(c).ljust(w) if i == 1 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, _WIDTHS))
    ).rstrip()


def header(op: str, unit: str) -> str:
    label = BANDWIDTH_UNITS[unit][0]
    cols = ("Size (Bytes)", "Description", "Duration", f"Throughput ({label})", f"BusBW ({label})", "#wrong")
    return f"# {op}\n{_fmt(cols)}"


def line(row: CommRow, unit: str, checked: bool) -> str:
    busbw = "-" if row.world_size == 1 else bandwidth(row.busbw_gbps, unit)
    wrong = str(row.wrong) if checked else "-"
    return _fmt((row.size_bytes, row.description, duration(row.duration_us),
                 bandwidth(row.throughput_gbps, unit), busbw, wrong))


def summary(op: str, rows: list[CommRow], unit: str, checked: bool) -> str:
    """nccl-tests' closing figure: the arithmetic mean of busbw over all sizes (docs/methodology.md §1)."""
    label, scale = BANDWIDTH_UNITS[unit]
    avg = sum(r.busbw_gbps for r in rows) / len(rows) * scale if rows else 0.0
    wrong = sum(r.wrong for r in rows)
    check = (f"{wrong} wrong elements: FAILED" if wrong else "all values OK") if checked else "not checked"
    bus = "-" if rows and rows[0].world_size == 1 else f"{avg:.3f} {label}"
    return f"# {op}: Avg bus bandwidth {bus} over {len(rows)} sizes; {check}"
