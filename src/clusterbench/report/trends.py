"""The trends page of `clusterbench history --report`: each metric's distribution over the fleet by
date, the nodes that regressed drawn against it, and the regressions in a table. Self-contained, as
a run's report is (report.html)."""

from __future__ import annotations

import datetime

import matplotlib.pyplot as plt

from clusterbench.analyse.history import Regression, Spread
from clusterbench.report.blocks import details, esc, note, num, section, table
from clusterbench.report.html import document
from clusterbench.report.plots import PAIR_SIZE, inline_svg, styled
from clusterbench.store.queries import Point

MAX_NODE_LINES = 8  # regressed nodes drawn over one metric's band; more would hide it
LONG_TABLE = 14  # days of a metric's table shown open; more are one click away


def _day(text: str) -> datetime.date:
    return datetime.date.fromisoformat(text)


def trend_plot(metric: str, spreads: list[Spread], nodes: dict[str, list[Point]]) -> str:
    with styled():
        fig, ax = plt.subplots(figsize=PAIR_SIZE)
        days = [_day(s.date) for s in spreads]
        ax.fill_between(days, [s.low for s in spreads], [s.high for s in spreads], alpha=0.25, linewidth=0,
                        label="fleet 10th-90th percentile")
        ax.plot(days, [s.median for s in spreads], marker="o", markersize=3, label="fleet median")
        for node, points in list(nodes.items())[:MAX_NODE_LINES]:
            ax.plot([datetime.datetime.fromtimestamp(p.started_s, datetime.timezone.utc).date() for p in points],
                    [p.value for p in points], marker=".", linewidth=1, label=node)
        ax.set_title(metric, fontsize=9)
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
        ax.legend(fontsize=7, loc="best")
        return inline_svg(fig, f"trend-{metric}")


def page(store: str, period: str, plots: dict[str, str], spreads: dict[str, list[Spread]],
         found: list[Regression]) -> str:
    """The page: the regressions, then one plot and table per metric."""
    rows = [[esc(r.node), esc(r.metric), esc(r.rule), esc(r.level), num(r.value), num(r.own), num(r.fleet),
             esc(r.when)] for r in found]
    lead = (f"{len(found)} node figure{'s' * (len(found) != 1)} fell against both the node's own recent median "
            "and its class's." if found else "No node fell against both its own recent median and its class's.")
    body = section("regressions", "Regressions",
                   table(["node", "metric", "rule", "level", "latest", "own median", "class median", "when"],
                         rows, numeric_from=4) if rows else note("none found"), lead=lead)
    for metric, svg in plots.items():
        table_rows = [[esc(s.date), str(s.nodes), num(s.worst), num(s.low), num(s.median), num(s.high), num(s.best)]
                      for s in reversed(spreads[metric])]  # the latest first
        by_date = table(["date", "nodes", "min", "p10", "median", "p90", "max"], table_rows)
        if len(table_rows) > LONG_TABLE:
            by_date = details(f"by date: {len(table_rows)} days", by_date)
        body += section(f"m-{metric}", metric, f'<div class="op"><div>{svg}</div><div>{by_date}</div></div>')
    return document("clusterbench history", f"store <b>{esc(store)}</b> · {esc(period)}", body,
                    "the results store by <code>clusterbench history --report</code>")
