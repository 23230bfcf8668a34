"""The comm section: busbw and time per call against size per op, the theoretical link line, the tables.

Every bandwidth in the section is in the unit the run printed (comm_options.unit), the link line
included, so plots, summaries and tables read alike and nobody converts. Small messages are judged by
their time per call, large ones by busbw, so each op gets both. Several ops are drawn as small
multiples at shared scales after an overview of all of them, rather than as full-size repeats.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field, replace

from clusterbench import limits
from clusterbench.analyse import expected
from clusterbench.analyse.metrics import Metrics
from clusterbench.report.blocks import details, esc, note, num, pct, section, sentence, table
from clusterbench.report.plots import (
    PALETTE,
    PANEL_SIZE,
    Curve,
    Scales,
    busbw_plot,
    latency_plot,
    log_span,
    op_panel_plot,
)
from clusterbench.results.run import Run
from clusterbench.stages.comm import teams
from clusterbench.stages.comm.links import link_line
from clusterbench.stages.comm.records import COMM, COMM_OPTIONS, CommOptions, CommRow
from clusterbench.stages.hardware.records import HARDWARE
from clusterbench.units import BANDWIDTH_UNITS, BITS_PER_BYTE, bandwidth, duration, human_bytes

# link_line and limits write their figures in GB/s: restated in the page's unit when that is another one.
_LINK_LABEL = BANDWIDTH_UNITS["GBps"][0]
_GBS = re.compile(r"(\d[\d,]*(?:\.\d+)?)(?:([-–])(\d[\d,]*(?:\.\d+)?))? GB/s")
_SCOPES = {"intra": "each node's ranks among themselves, all nodes at once",
           "inter": "one rank per node (rail k: local rank k of every node), one rail at a time",
           "algo": "the whole job once per NCCL algorithm (--nccl-algo) or per collective algorithm built from "
                   "send/recv (--algo, beside the native op; docs/methodology.md §13); busbw equals the wire's "
                   "rate only for ring algorithms"}


@dataclass(frozen=True)
class View:
    """What every figure of the section shares: the run's unit, the link line in it, the axes' ranges."""

    unit: str  # a key of BANDWIDTH_UNITS
    checked: bool
    line: float | None  # the theoretical link line, in `unit`
    line_text: str  # link_line's own words (its figure in GB/s), or why there is no line
    scales: Scales = Scales()
    expected: dict[str, str] = field(default_factory=dict)  # op -> its busbw against its expected figure, in words

    @property
    def label(self) -> str:
        return BANDWIDTH_UNITS[self.unit][0]

    @property
    def line_label(self) -> str:
        return f"theoretical line {num(self.line)} {self.label}" if self.line else ""

    def in_unit(self, gbps: float) -> float:
        return gbps * BANDWIDTH_UNITS[self.unit][1]

    def busbw(self, row: CommRow) -> float:
        """busbw in the page's unit; 0 (drawn as no point) for one rank, which moves nothing."""
        return 0.0 if row.world_size == 1 else self.in_unit(row.busbw_gbps)

    def restated(self, text: str) -> str:
        """Words of link_line or limits with their GB/s figures (ranges too) written in the page's unit."""
        if self.label == _LINK_LABEL:
            return text

        def convert(m: re.Match) -> str:
            figures = [num(self.in_unit(float(x.replace(",", "")) * BITS_PER_BYTE)) for x in (m[1], m[3]) if x]
            return (m[2] or "").join(figures) + f" {self.label}"

        return _GBS.sub(convert, text)


def rows_by_op(run: Run) -> dict[str, list[CommRow]]:
    """The run's global-scope rows grouped by op in run order, sorted by size."""
    grouped: dict[str, list[CommRow]] = {}
    for row in COMM.of(run):
        if row.scope == "global":
            grouped.setdefault(row.op, []).append(row)
    return {op: sorted(rows, key=lambda r: r.size_bytes) for op, rows in grouped.items()}


def scoped_rows(run: Run) -> dict[tuple[str, str], dict[str, list[CommRow]]]:
    """Rows of the intra, inter and algo scopes: per (scope, op), per team, sorted by size."""
    grouped: dict[tuple[str, str], dict[str, list[CommRow]]] = {}
    for row in COMM.of(run):
        if row.scope != "global":
            grouped.setdefault((row.scope, row.op), {}).setdefault(row.team, []).append(row)
    # --algo: the native op's own line in each algorithm plot, to be measured against.
    for (scope, op), by_team in grouped.items():
        if scope == "algo" and any(r.algo != "native" for rows in by_team.values() for r in rows):
            native = [replace(r, team="native") for r in COMM.of(run) if r.scope == "global" and r.op == op]
            if native:
                grouped[(scope, op)] = {"native": native, **by_team}
    return {key: {team: sorted(rows, key=lambda r: r.size_bytes) for team, rows in teams.items()}
            for key, teams in grouped.items()}


def plot_count(run: Run) -> int:
    """How many plots comm_section draws: busbw and latency side by side (of all ops, or of the one
    op), a small multiple per op when there are several, one per scope and op."""
    ops = len(rows_by_op(run))
    return (2 if ops else 0) + (ops if ops > 1 else 0) + len(scoped_rows(run))


def comm_section(run: Run, metrics: Metrics) -> str:
    view = _page_view(run, metrics)
    groups = rows_by_op(run)
    body = _line_notes(run, view) + _above_line(groups, view)
    if len(groups) == 1:
        body += _single(*next(iter(groups.items())), view)
    elif groups:
        body += _overview(groups, view) + _multiples(groups, view)
    body += _scope_blocks(scoped_rows(run), view)
    lead = (f"busbw follows the nccl-tests convention (algbw × the op's factor), so one line marks what the "
            f"link allows for every op; small messages are judged by their time per call instead. Every "
            f"bandwidth here is in {esc(view.label)}, as the run printed it.")
    return section("comm", "Collective communication", body, lead=lead)


def _page_view(run: Run, metrics: Metrics) -> View:
    options = COMM_OPTIONS.of(run) or CommOptions()
    line_gbs, line_text = link_line(run)
    line = line_gbs * BITS_PER_BYTE * BANDWIDTH_UNITS[options.unit][1] if line_gbs else None
    view = View(options.unit, options.check, line, line_text)
    # The ranges of every row and the line: the scopes' panels share them with the ops'.
    times = [t for r in COMM.of(run)
             for t in ((r.duration_us, r.p50_us, r.p99_us) if _stamped(r) else (r.duration_us,))]
    scales = Scales(sizes=log_span(r.size_bytes for r in COMM.of(run)),
                    busbw=log_span([view.busbw(r) for r in COMM.of(run)] + [line or 0.0]), latency=log_span(times))
    return replace(view, scales=scales, expected=_expected_words(run, view, metrics.values))


def _expected_words(run: Run, view: View, values: dict[str, float]) -> dict[str, str]:
    """Per op with an expected busbw: the run's figure as a share of what systems like this measure."""
    words = {}
    for name, e in run.expected.items():
        op = re.fullmatch(r"comm\.(\w+)\.busbw_gbps\.top", name)
        if op and name in values:
            words[op[1]] = (f"at the largest sizes {num(view.in_unit(values[name]))} {esc(view.label)} = "
                            f"{pct(values[name] / e.value, 0)} of {esc(expected.whose(e))}")
    return words


def _stamped(row: CommRow) -> bool:
    """Whether p50 and p99 describe single calls; under loop or graph timing they spread batch means."""
    return row.timing == "stamps"


def _busbw_curve(rows: list[CommRow], view: View) -> Curve:
    return Curve([r.size_bytes for r in rows], [view.busbw(r) for r in rows])


def _latency_curve(rows: list[CommRow], band: bool = True) -> Curve:
    spread = ([r.p50_us for r in rows], [r.p99_us for r in rows]) if band and all(map(_stamped, rows)) else None
    return Curve([r.size_bytes for r in rows], [r.duration_us for r in rows], spread)


def _line_notes(run: Run, view: View) -> str:
    if not view.line:
        return note(esc(sentence(view.line_text)))
    notes = note(esc(f"Theoretical line: {view.restated(view.line_text)}, one direction."))
    if any(g.nvlink_version == 4 for g in HARDWARE.of(run).gpus):
        notes += note(esc(f"NVLink 4: {view.restated(limits.NVLINK[4].note)}."))
    return notes


def _above_line(groups: dict[str, list[CommRow]], view: View) -> str:
    peaks = {op: max(view.busbw(r) for r in rows) for op, rows in groups.items()}
    above = ", ".join(f"{op} peaks at {num(p)}" for op, p in peaks.items() if view.line and p > view.line)
    if not above:
        return ""
    return note(esc(f"busbw is above the link line ({above} > {num(view.line)} {view.label}).")
                + " That is not an error: with NVLS (NVLink SHARP) or SHARP in the network the switch does part "
                "of the reduction, so each GPU moves fewer bytes than the busbw formula assumes.", "warn")


def _pair(busbw_svg: str, latency_svg: str) -> str:
    return f'<div class="pair"><div>{busbw_svg}</div><div>{latency_svg}</div></div>'


def _single(op: str, rows: list[CommRow], view: View) -> str:
    """One op needs no small multiples: its busbw and its time per call at full size."""
    pair = _pair(
        busbw_plot(f"comm-{op}-busbw", {op: _busbw_curve(rows, view)}, view.label, view.line, view.line_label,
                   view.scales, named=False),
        latency_plot(f"comm-{op}-latency", {"Duration (mean)": _latency_curve(rows)}, view.scales))
    return f"<h3><code>{esc(op)}</code></h3>{pair}<p>{_summary(rows, view)}</p>{_op_table(op, rows, view)}"


def _overview(groups: dict[str, list[CommRow]], view: View) -> str:
    busbw = {op: _busbw_curve(rows, view) for op, rows in groups.items()}
    # Without bands: several ops' spreads on one plot hide each other.
    latency = {op: _latency_curve(rows, band=False) for op, rows in groups.items()}
    # Named once, in the latency plot, whose upper left corner is empty: busbw has none to spare for seven ops.
    pair = _pair(busbw_plot("comm-all-busbw", busbw, view.label, view.line, view.line_label, view.scales,
                            named=False),
                 latency_plot("comm-all-latency", latency, view.scales))
    return f"<h3>All ops</h3>{pair}"


def _multiples(groups: dict[str, list[CommRow]], view: View) -> str:
    panels = "".join(_panel(op, rows, view, color)
                     for (op, rows), color in zip(groups.items(), itertools.cycle(PALETTE)))
    tables = "".join(_op_table(op, rows, view) for op, rows in groups.items())
    return f'<h3>Per op, at the same scales</h3><div class="multiples">{panels}</div>{tables}'


def _panel(op: str, rows: list[CommRow], view: View, color: str) -> str:
    plot = op_panel_plot(f"comm-{op}", _busbw_curve(rows, view), _latency_curve(rows), view.label, view.line,
                         view.line_label, view.scales, color)
    return (f'<figure class="panel"><figcaption><code>{esc(op)}</code></figcaption>{plot}'
            f"<p>{_summary(rows, view)}</p></figure>")


def _summary(rows: list[CommRow], view: View) -> str:
    peak = max(view.busbw(r) for r in rows)
    avg = sum(view.busbw(r) for r in rows) / len(rows)
    wrong = sum(r.wrong for r in rows)
    check = ("not checked" if not view.checked else
             f'<span class="bad">{wrong} wrong elements</span>' if wrong else "all values OK")
    smallest = rows[0]
    return (f"avg busbw {num(avg)} {esc(view.label)} over {len(rows)} sizes (nccl-tests' figure); "
            f"peak {num(peak)} {esc(view.label)}" + (f" = {pct(peak / view.line)} of the line" if view.line else "")
            + f"; {duration(smallest.duration_us)} per call at {human_bytes(smallest.size_bytes)}; {check}"
            + (f"; {view.expected[smallest.op]}." if smallest.op in view.expected else "."))


def _op_table(op: str, rows: list[CommRow], view: View) -> str:
    label = view.label
    headers = ["Size (Bytes)", "Description", "Duration", f"Throughput ({label})", f"BusBW ({label})",
               "#wrong", "p50", "p99", "cv"]
    body = [[
        str(r.size_bytes), esc(r.description), duration(r.duration_us), bandwidth(r.throughput_gbps, view.unit),
        "-" if r.world_size == 1 else bandwidth(r.busbw_gbps, view.unit),
        ("-" if not view.checked else f'<span class="bad">{r.wrong}</span>' if r.wrong else "0"),
        duration(r.p50_us), duration(r.p99_us), f"{r.cv:.2f}",
    ] for r in rows]
    return details(f"{op}: table of {len(rows)} sizes", table(headers, body, numeric_from=2))


def _scope_blocks(scoped: dict[tuple[str, str], dict[str, list[CommRow]]], view: View) -> str:
    """Per scope, one explanation, a small multiple per op (a line per team) and the teams' tables."""
    by_scope: dict[str, dict[str, dict[str, list[CommRow]]]] = {}
    for (scope, op), by_team in scoped.items():
        by_scope.setdefault(scope, {})[op] = by_team
    html = ""
    for scope, ops in by_scope.items():
        panels = "".join(_scope_panel(scope, op, by_team, view) for op, by_team in ops.items())
        tables = "".join(_scope_table(scope, op, by_team, view) for op, by_team in ops.items())
        what = _SCOPES[scope]
        html += (f"<h3>Scope <code>{esc(scope)}</code></h3><p>{esc(what[:1].upper() + what[1:])}. A line per "
                 f"team; each team is compared at its largest size with the median of the teams.</p>"
                 f'<div class="multiples">{panels}</div>{tables}')
    return html


def _scope_panel(scope: str, op: str, by_team: dict[str, list[CommRow]], view: View) -> str:
    w = teams.worst([r for rows in by_team.values() for r in rows])
    curves = {team: _busbw_curve(rows, view) for team, rows in by_team.items()}
    plot = busbw_plot(f"comm-{scope}-{op}", curves, view.label, scales=view.scales, size=PANEL_SIZE)
    share = f" = {pct(w.share)} of" if w.share is not None else ", against"
    text = (f"slowest of {w.teams}: {esc(w.row.team)}, {num(view.busbw(w.row))} {esc(view.label)}{share} the "
            f"median {num(view.in_unit(w.median_gbps))} {esc(view.label)}.")
    return (f'<figure class="panel"><figcaption><code>{esc(op)}</code>, {esc(scope)}</figcaption>{plot}'
            f"<p>{text}</p></figure>")


def _scope_table(scope: str, op: str, by_team: dict[str, list[CommRow]], view: View) -> str:
    rows = [r for team_rows in by_team.values() for r in team_rows]
    w = teams.worst(rows)
    body = [[esc(r.team), human_bytes(r.size_bytes), str(r.world_size), str(r.nodes),
             bandwidth(r.busbw_gbps, view.unit), pct(r.busbw_gbps / w.median_gbps) if w.median_gbps > 0 else "-",
             str(sum(x.wrong for x in by_team[r.team]))]
            for r in sorted(teams.tops(rows).values(), key=lambda r: r.busbw_gbps)]
    headers = ["team", "size", "ranks", "nodes", f"BusBW ({view.label})", "of median", "#wrong"]
    return details(f"{op}, {scope}: table of {len(body)} teams at their largest size, slowest first",
                   table(headers, body, numeric_from=1))
