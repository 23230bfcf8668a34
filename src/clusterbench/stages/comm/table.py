"""The printed comm table: Size (Bytes) | Description | Duration | Throughput | BusBW | #wrong."""

from __future__ import annotations

from clusterbench.stages.comm import pairs, teams
from clusterbench.stages.comm.records import CommRow, PairRow
from clusterbench.units import BANDWIDTH_UNITS, bandwidth, duration

_WIDTHS = (14, 30, 12, 18, 14, 8)


def _fmt(cells: tuple) -> str:
    return "  ".join(
        str(c).ljust(w) if i == 1 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, _WIDTHS))
    ).rstrip()


def header(op: str, unit: str, team: str = "", timing: str = "stamps") -> str:
    label = BANDWIDTH_UNITS[unit][0]
    cols = ("Size (Bytes)", "Description", "Duration", f"Throughput ({label})", f"BusBW ({label})", "#wrong")
    where = f", {team}" if team else ""
    return f"# {op} (timing: {timing}{where})\n{_fmt(cols)}"


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


def worst_team(scope: str, rows: list[CommRow], unit: str) -> str:
    """Per op, the team (node or rail) with the lowest busbw at its largest size."""
    label, scale = BANDWIDTH_UNITS[unit]
    noun = {"intra": "node", "inter": "rail", "algo": "algorithm"}[scope]
    lines = []
    for op in dict.fromkeys(r.op for r in rows):
        w = teams.worst([r for r in rows if r.op == op])
        share = f", {w.share:.2f}x the median {w.median_gbps * scale:.3f} {label}" if w.share is not None else ""
        lines.append(f"# {scope}: worst {noun} for {op}: {w.row.team}, busbw {w.row.busbw_gbps * scale:.3f} {label} "
                     f"at {w.row.size_bytes} B{share} over {w.teams} {noun}s")
    return "\n".join(lines)


MATRIX_MAX = 16  # larger jobs get the flags and the CSV, not a matrix on the terminal


def pair_summary(rows: list[PairRow], unit: str, flag_below: float) -> str:
    """The pairwise matrix (row: sender, column: receiver), the class medians and the flags."""
    label, scale = BANDWIDTH_UNITS[unit]
    ranks = sorted({r.src for r in rows} | {r.dst for r in rows})
    lines = []
    if len(ranks) <= MATRIX_MAX:
        cell = {(r.src, r.dst): r.gbps * scale for r in rows}
        lines.append(f"# pairwise {label} (row sends, column receives)")
        lines.append("src\\dst " + "".join(f"{d:>10}" for d in ranks))
        for s in ranks:
            lines.append(f"{s:>7} " + "".join(f"{cell[(s, d)]:>10.3f}" if (s, d) in cell else f"{'-':>10}"
                                              for d in ranks))
    latency = pairs.latencies(rows)
    for k, median in pairs.medians(rows).items():
        lines.append(f"# pairwise {k}: median {median * scale:.3f} {label}, median latency {duration(latency[k])}")
    found = pairs.flags(rows, flag_below)
    lines += [f"# FLAG {f.text()}" for f in found] or [
        f"# pairwise: no pair, rank or node below {flag_below:g}x its class's median"]
    wrong = sum(r.wrong for r in rows)
    if wrong:
        lines.append(f"# pairwise: {wrong} wrong elements: FAILED")
    return "\n".join(lines)
