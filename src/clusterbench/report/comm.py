"""The comm section: busbw against size per op, the theoretical link line, the tables."""

from __future__ import annotations

from clusterbench import limits
from clusterbench.analyse import teams
from clusterbench.analyse.links import link_line
from clusterbench.report.blocks import details, esc, note, num, pct, section, table
from clusterbench.report.plots import busbw_plot
from clusterbench.results.schema import CommOptions, CommRow, Run
from clusterbench.units import BANDWIDTH_UNITS, BITS_PER_BYTE, bandwidth, duration, human_bytes


def rows_by_op(run: Run) -> dict[str, list[CommRow]]:
    """The run's global-scope rows grouped by op in run order, sorted by size."""
    grouped: dict[str, list[CommRow]] = {}
    for row in run.comm:
        if row.scope == "global":
            grouped.setdefault(row.op, []).append(row)
    return {op: sorted(rows, key=lambda r: r.size_bytes) for op, rows in grouped.items()}


def scoped_rows(run: Run) -> dict[tuple[str, str], dict[str, list[CommRow]]]:
    """Rows of the intra and inter scopes: per (scope, op), per team, sorted by size."""
    grouped: dict[tuple[str, str], dict[str, list[CommRow]]] = {}
    for row in run.comm:
        if row.scope != "global":
            grouped.setdefault((row.scope, row.op), {}).setdefault(row.team, []).append(row)
    return {key: {team: sorted(rows, key=lambda r: r.size_bytes) for team, rows in teams.items()}
            for key, teams in grouped.items()}


def plot_count(run: Run) -> int:
    """How many plots comm_section draws: one per op, an overview when there are several, one per
    scope and op."""
    ops = len(rows_by_op(run))
    return ops + (1 if ops > 1 else 0) + len(scoped_rows(run))


def comm_section(run: Run) -> str:
    groups = rows_by_op(run)
    options = run.comm_options or CommOptions()
    unit, checked = options.unit, options.check
    line, line_text = link_line(run)
    line_label = f"theoretical {line_text}" if line else ""
    lead = (f"busbw follows the nccl-tests convention (algbw × the op's factor), so one line marks what the "
            f"link allows for every op. Plots in GB/s; tables in {esc(BANDWIDTH_UNITS[unit][0])}, as the run "
            f"printed them.")
    why_not = line_text[:1].upper() + line_text[1:] + "."
    body = note(esc(f"Theoretical line: {line_text}, one direction." if line else why_not))
    if line and any(g.nvlink_version == 4 for g in run.hardware.gpus):
        body += note(esc(f"NVLink 4: {limits.NVLINK[4].note}."))
    series = {op: ([r.size_bytes for r in rows], [_gbs(r) for r in rows]) for op, rows in groups.items()}
    if len(groups) > 1:
        body += f'<h3>All ops</h3><div class="wide">{busbw_plot("comm-all", series, line, line_label)}</div>'
    for op, rows in groups.items():
        body += _op_block(op, rows, series[op], line, line_label, unit, checked)
    for (scope, op), by_team in scoped_rows(run).items():
        body += _scope_block(scope, op, by_team, unit)
    return section("comm", "Collective communication", body, lead=lead)


def _gbs(row: CommRow) -> float:
    return 0.0 if row.world_size == 1 else row.busbw_gbps / BITS_PER_BYTE


def _op_block(op: str, rows: list[CommRow], series: tuple, line: float | None, line_label: str,
              unit: str, checked: bool) -> str:
    label, scale = BANDWIDTH_UNITS[unit]
    peak = max(series[1], default=0.0)
    avg = sum(r.busbw_gbps for r in rows) / len(rows) * scale
    wrong = sum(r.wrong for r in rows)
    summary = (f"avg busbw {num(avg)} {esc(label)} over {len(rows)} sizes (nccl-tests' figure); "
               f"peak {num(peak)} GB/s" + (f" = {pct(peak / line)} of the line" if line else ""))
    check = ("not checked" if not checked else
             f'<span class="bad">{wrong} wrong elements</span>' if wrong else "all values OK")
    notes = ""
    if line and peak > line:
        notes = note(f"busbw is above the link line ({num(peak)} &gt; {num(line)} GB/s). That is not an error: "
                     "with NVLS (NVLink SHARP) or SHARP in the network the switch does part of the reduction, "
                     "so each GPU moves fewer bytes than the busbw formula assumes.", "warn")
    headers = ["Size (Bytes)", "Description", "Duration", f"Throughput ({label})", f"BusBW ({label})",
               "#wrong", "p50", "p99", "cv"]
    body = [[
        str(r.size_bytes), esc(r.description), duration(r.duration_us), bandwidth(r.throughput_gbps, unit),
        "-" if r.world_size == 1 else bandwidth(r.busbw_gbps, unit),
        ("-" if not checked else f'<span class="bad">{r.wrong}</span>' if r.wrong else "0"),
        duration(r.p50_us), duration(r.p99_us), f"{r.cv:.2f}",
    ] for r in rows]
    tables = details(f"table: {len(rows)} sizes", table(headers, body, numeric_from=2))
    plot = busbw_plot(f"comm-{op}", {op: series}, line, line_label)
    text = f"<p>{summary}; {check}.</p>{notes}"
    return f'<h3><code>{esc(op)}</code></h3><div class="op"><div>{plot}</div><div>{text}</div></div>{tables}'


def _scope_block(scope: str, op: str, by_team: dict[str, list[CommRow]], unit: str) -> str:
    """One plot with a line per node (intra) or rail (inter), and each team at its largest size."""
    label = BANDWIDTH_UNITS[unit][0]
    rows = [r for team_rows in by_team.values() for r in team_rows]
    w = teams.worst(rows)
    series = {team: ([r.size_bytes for r in team_rows], [_gbs(r) for r in team_rows])
              for team, team_rows in by_team.items()}
    plot = busbw_plot(f"comm-{scope}-{op}", series)
    body = [[esc(r.team), human_bytes(r.size_bytes), str(r.world_size), str(r.nodes), bandwidth(r.busbw_gbps, unit),
             pct(r.busbw_gbps / w.median_gbps) if w.median_gbps > 0 else "-",
             str(sum(x.wrong for x in by_team[r.team]))]
            for r in sorted(teams.tops(rows).values(), key=lambda r: r.busbw_gbps)]
    what = {"intra": "each node's ranks among themselves, all nodes at once",
            "inter": "one rank per node (rail k: local rank k of every node), one rail at a time",
            "algo": "the whole job once per NCCL algorithm (busbw equals the wire's rate only for Ring)"}[scope]
    text = (f"<p>{esc(scope)}: {what}. Each at its largest size, slowest first, against the median "
            f"{bandwidth(w.median_gbps, unit)} {esc(label)}:</p>"
            + table(["team", "size", "ranks", "nodes", f"BusBW ({label})", "of median", "#wrong"], body,
                    numeric_from=1))
    return (f'<h3><code>{esc(op)}</code>, {esc(scope)}</h3>'
            f'<div class="op"><div>{plot}</div><div>{text}</div></div>')
