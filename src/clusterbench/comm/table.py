"""The printed comm table: Size (Bytes) | Description | Duration | Throughput | BusBW | #wrong."""

from __future__ import annotations

from clusterbench.results import CommRow

UNITS = {"Gbps": ("Gbps", 1.0), "GBps": ("GB/s", 1 / 8)}
_WIDTHS = (14, 30, 12, 18, 14, 8)


def _fmt(cells: tuple) -> str:
    return "  ".join(
        str(c).ljust(w) if i == 1 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, _WIDTHS))
    ).rstrip()


def header(op: str, unit: str) -> str:
    label = UNITS[unit][0]
    cols = ("Size (Bytes)", "Description", "Duration", f"Throughput ({label})", f"BusBW ({label})", "#wrong")
    title = f"# {op}"
    return f"{title}\n{_fmt(cols)}"


def duration(us: float) -> str:
    if us < 1000:
        return f"{us:.2f} us"
    if us < 1e6:
        return f"{us / 1e3:.3f} ms"
    return f"{us / 1e6:.3f} s"


def describe(row: CommRow) -> str:
    text = f"{row.count} x {row.dtype}"
    if row.reduce_op:
        text += f" {row.reduce_op}"
    return text + (" in-place" if row.in_place else "")


def line(row: CommRow, unit: str, checked: bool) -> str:
    scale = UNITS[unit][1]
    busbw = "-" if row.world_size == 1 else f"{row.busbw_gbps * scale:.3f}"
    wrong = str(row.wrong) if checked else "-"
    return _fmt((row.size_bytes, describe(row), duration(row.duration_us),
                 f"{row.throughput_gbps * scale:.3f}", busbw, wrong))


def summary(op: str, rows: list[CommRow], unit: str, checked: bool) -> str:
    """nccl-tests' closing figure: the arithmetic mean of busbw over all sizes (REFERENCE.md 1)."""
    label, scale = UNITS[unit]
    avg = sum(r.busbw_gbps for r in rows) / len(rows) * scale if rows else 0.0
    wrong = sum(r.wrong for r in rows)
    check = (f"{wrong} wrong elements: FAILED" if wrong else "all values OK") if checked else "not checked"
    bus = "-" if rows and rows[0].world_size == 1 else f"{avg:.3f} {label}"
    return f"# {op}: Avg bus bandwidth {bus} over {len(rows)} sizes; {check}"
