"""The Nodes section: every node a row beside its class's median, coloured by how far it falls short,
its verdict and reasons; then the retests, the odd facts and the numerics vote (docs/methodology.md
§16). It reads at 8 nodes and at 500: past SHOWN_ALL nodes, the passing rows fold away."""

from __future__ import annotations

import statistics

from clusterbench.nodechecks.table import BANDED
from clusterbench.report.blocks import card, cards, details, esc, note, num, section, table
from clusterbench.stages.fleet.records import Fleet, NodeRow

SHOWN_ALL = 32
COLUMNS = {**BANDED, "send_gbps": "sends Gbps", "recv_gbps": "receives Gbps", "latency_us": "latency us"}
LOWER_IS_BETTER = {"latency_us"}
STATUS = {"PASS": "PASS", "SUSPECT": "WARN", "EXCLUDE": "FAIL"}


def _shade(ratio: float) -> str:
    """A cell's colour by its ratio to the median, better-is-higher: the fleet's shades of warn and fail."""
    if ratio < 0.8:
        return "background:var(--fail-bg)"
    return "background:var(--warn-bg)" if ratio < 0.95 else ""


def _verdict(verdict: str) -> str:
    return f'<span class="badge {STATUS[verdict].lower()}">{esc(verdict)}</span>'


def _rows(rows: list[NodeRow], columns: list[str], medians: dict[tuple[str, str], float]) -> list[list[str]]:
    out = []
    for row in rows:
        cells = [esc(row.node), _verdict(row.verdict)]
        for name in columns:
            value, median = row.metrics.get(name), medians.get((row.klass, name))
            if value is None or not median:
                cells.append(num(value))
                continue
            ratio = median / value if name in LOWER_IS_BETTER and value else value / median
            cells.append(f'<span style="{_shade(ratio)}" title="{ratio:.2f}x the median">{num(value)}</span>')
        out.append(cells)
    return out


def _reasons(rows: list[NodeRow]) -> str:
    """Why each node that has reasons stands where it does, below the table, where long lines can wrap."""
    items = "".join(f"<li>{_verdict(r.verdict)} <b>{esc(r.node)}</b>: {esc('; '.join(r.reasons))}</li>"
                    for r in rows if r.reasons)
    return f"<ul>{items}</ul>" if items else ""


def fleet_section(fleet: Fleet) -> str:
    columns = [c for c in COLUMNS if any(c in r.metrics for r in fleet.nodes)]
    medians = {(b.klass, b.metric): b.median for b in fleet.bands}
    for klass in {r.klass for r in fleet.nodes}:
        for name in columns:
            values = [r.metrics[name] for r in fleet.nodes if r.klass == klass and name in r.metrics]
            if values:
                medians.setdefault((klass, name), statistics.median(values))
    order = {"EXCLUDE": 0, "SUSPECT": 1, "PASS": 2}
    rows = sorted(fleet.nodes, key=lambda r: (order[r.verdict], r.node))
    headers = ["node", "verdict", *[COLUMNS[c] for c in columns]]
    named = [r for r in rows if r.verdict != "PASS"]
    passing = [r for r in rows if r.verdict == "PASS"]
    if len(rows) <= SHOWN_ALL:
        body = table(headers, _rows(rows, columns, medians), numeric_from=2)
    else:
        body = (table(headers, _rows(named, columns, medians), numeric_from=2) if named else "") + details(
            f"{len(passing)} passing nodes", table(headers, _rows(passing, columns, medians), numeric_from=2))
    body += _reasons(rows)
    summary = cards([
        card("nodes", str(len(fleet.nodes))),
        card("excluded", f'<span class="{"bad" if fleet.excluded else ""}">{len(fleet.excluded)}</span>',
             esc(fleet.exclude) if fleet.excluded else ""),
        card("suspects", str(sum(r.verdict == "SUSPECT" for r in fleet.nodes))),
        card("flaky links", str(len(fleet.flaky))),
    ])
    extra = ""
    if fleet.excluded:
        extra += note(f"Take out: <code>--exclude={esc(fleet.exclude)}</code>", "fail")
    for f in fleet.job_findings:
        extra += note(esc(f"Of the job, no one node ({f.severity}): {f.subject}: {f.what}; {f.action}"),
                      "fail" if f.severity == "critical" else "warn")
    for text in fleet.bad_switches:
        extra += note(esc(f"A fault its nodes share: {text}"), "fail")
    if fleet.coverage is not None:
        extra += note(esc(f"Pairs of nodes measured: {fleet.coverage.summary()}."))
    if fleet.note:
        extra += note(esc(fleet.note), "warn")
    if fleet.retests:
        extra += details(f"retests: {len(fleet.retests)} directions measured again", table(
            ["from", "to", "why", "first Gbps", "retest Gbps", "latency us", "slow again"],
            [[esc(t.src_node), esc(t.dst_node), esc(t.why), num(t.first_gbps), num(t.gbps), num(t.latency_us),
              "yes" if t.slow else "no"] for t in fleet.retests], numeric_from=3))
    if fleet.whole is not None:
        extra += note(esc(f"all_reduce across all {len(fleet.whole.nodes)} nodes (one rank each): "
                          f"{fleet.whole.busbw_gbps:.3g} Gbps busbw"
                          + (f"; the search narrowed its shortfall to {', '.join(fleet.isolated)}" if fleet.isolated
                             else "")), "fail" if fleet.isolated else "info")
    if fleet.search:
        extra += details(f"the search: {len(fleet.search)} parts measured", table(
            ["nodes", "busbw Gbps"], [[esc(", ".join(g.nodes)), num(g.busbw_gbps)] for g in fleet.search]))
    for title, lines in (("flaky links (reported, nobody excluded)", fleet.flaky),
                         ("bad links (to look at; nobody excluded for them)", fleet.bad_links)):
        if lines:
            extra += f"<h3>{esc(title)}</h3><ul>" + "".join(f"<li>{esc(t)}</li>" for t in lines) + "</ul>"
    if fleet.odd_facts:
        extra += "<h3>Facts the fleet disagrees on</h3>" + table(
            ["fact", "odd nodes", "their values", "majority", "nodes with it"],
            [[esc(o.fact), esc(", ".join(o.nodes)), esc(", ".join(o.values)), esc(o.majority), str(o.majority_nodes)]
             for o in fleet.odd_facts], numeric_from=4)
    copies = [(p.node, c) for p in fleet.probes for c in p.copies]
    if copies:
        extra += details(f"copies: each node's slowest, against its link ({len(copies)})", table(
            ["node", "copy", "figure", "best GB/s", "median", "worst", "batches", "link", "of the link"],
            [[esc(node), esc(c.subject), esc(COLUMNS.get(c.metric, c.metric)), num(c.gbps), num(c.median_gbps),
              num(c.worst_gbps), str(c.batches), esc(c.link), num(c.share)] for node, c in copies], numeric_from=3))
    if fleet.divergences:
        extra += "<h3>Numerics vote</h3>" + table(
            ["node", "rank", "device", "first step", "its loss", "the majority's", "majority of"],
            [[esc(d.node), str(d.rank), esc(d.device), str(d.step), esc(repr(d.loss)), esc(repr(d.majority_loss)),
              f"{d.majority} of {d.voters}"] for d in fleet.divergences], numeric_from=1)
    elif fleet.numerics:
        extra += note(esc(f"Numerics vote: {len(fleet.numerics)} devices agree bit for bit on every step."))
    lead = ("Every node beside its hardware class's median (learned from this fleet by iterative exclusion, or "
            "from a baseline); a cell is amber below 0.95x, red below 0.8x. A node is excluded only on proof: "
            "slow again against two healthy partners, out of its band twice, numerics outvoted, or silent.")
    return section("nodes", "Nodes", summary + body + extra, lead=lead)
