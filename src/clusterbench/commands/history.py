"""`clusterbench history`: what the results store remembers (docs/methodology.md, "History").

    history                                 what the store holds
    history --node N --metric M             a node's figure over time
    history --metric M                      the fleet's distribution of a metric by date
    history --regressions [--rules YAML]    nodes whose latest figure fell against their own and their class's
    history --report FILE.html              the trends page

A period (--since, default 30d) and a hardware class (--class) narrow every question. Exit 1 when
--regressions finds one, so a cron job or a CI step can act on it.
"""

from __future__ import annotations

import argparse
import fnmatch
import time
from pathlib import Path
from typing import TYPE_CHECKING

from clusterbench import args as argtypes
from clusterbench.command import ToolCommand
from clusterbench.errors import EXIT_FAILED, EXIT_OK, UsageError
from clusterbench.publish import add_store_argument
from clusterbench.store import where as store_where

if TYPE_CHECKING:  # SQLAlchemy and the analysis load only when a question is asked
    from sqlalchemy import Connection

    from clusterbench.analyse.history import Regression
    from clusterbench.analyse.rules import Rule
    from clusterbench.store.history import Summary

DEFAULT_SINCE = "30d"
# What the trends page draws when no --metric is given: each node's own figures and the job's all_reduce.
TREND_METRICS = ("node.*", "check.*", "comm.all_reduce.busbw_gbps.top")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_store_argument(p, "read")
    p.add_argument("--since", type=argtypes.age, metavar="PERIOD",
                   help=f"only runs this recent: hours, days or weeks, like 12h, 30d, 8w (default {DEFAULT_SINCE})")
    p.add_argument("--metric", action="append", metavar="NAME",
                   help="a metric (a glob such as 'node.*' with --report or --regressions; repeatable)")
    p.add_argument("--node", help="with --metric: this node's figure over time")
    p.add_argument("--class", dest="klass", metavar="CLASS", help="only nodes of this hardware class")
    p.add_argument("--regressions", action="store_true",
                   help="nodes whose latest figure fell against their own recent median and their class's")
    p.add_argument("--rules", type=Path, metavar="YAML",
                   help="what a regression is (default: the shipped regression_rules.yaml)")
    p.add_argument("--window", type=argtypes.whole(1, 1000), default=5,
                   help="runs before the latest that a node's own recent median is taken over (default 5)")
    p.add_argument("--report", type=Path, metavar="FILE.html", help="write the trends page there")
    p.add_argument("--overwrite", action="store_true", help="replace the --report file when it exists")


def main(args: argparse.Namespace) -> int:
    from clusterbench.results.folder import check_output
    from clusterbench.store.db import open_store  # SQLAlchemy: only in the commands that use the store

    if args.node and not args.metric:
        raise UsageError("--node needs --metric: which of its figures to follow")
    report = check_output(args.report, "--report", args.overwrite) if args.report else None
    rules = _rules(args.rules) if args.regressions or report else None
    where = store_where.resolve(args.store)
    if where is None:
        raise UsageError("--store off: there is no store to read")
    since_s = time.time() - (args.since or argtypes.age(DEFAULT_SINCE))
    period = f"since {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(since_s))}"
    store = open_store(where, create=False)
    try:
        with store.reading() as conn:
            return _answer(conn, args, since_s, period, rules, report, where.shown)
    finally:
        store.close()


def _rules(path: Path | None) -> list[Rule]:
    from clusterbench.analyse.history import default_regression_rules
    from clusterbench.analyse.rules import load_rules

    rules = load_rules(path) if path else default_regression_rules()
    other = [r.name for r in rules if r.function != "change"]
    if other:
        raise UsageError(f"--rules {path}: rule {other[0]!r} is not of function change; a regression is a change "
                         "against the node's own recent median and against its class's")
    return rules


def _metrics(conn: Connection, patterns: list[str] | None, default: tuple[str, ...]) -> list[str]:
    from clusterbench.store import history

    known = history.metrics(conn)
    wanted = patterns or list(default)
    chosen = [m for m in known if any(fnmatch.fnmatchcase(m, p) for p in wanted)]
    if patterns and not chosen:
        near = [m for m in known if any(p.split(".")[0] == m.split(".")[0] for p in patterns)][:5]
        raise UsageError(f"--metric {', '.join(patterns)}: the store has no such metric"
                         + (f" (it has {', '.join(near)}, ...)" if near else ""))
    return chosen


def _answer(conn: Connection, args: argparse.Namespace, since_s: float, period: str, rules: list[Rule] | None,
            report: Path | None, shown: str) -> int:
    from clusterbench.analyse import history as analysis
    from clusterbench.store import history

    if not (args.metric or args.regressions or report):
        return _summary(history.summary(conn), shown)
    if args.node:
        points = history.points(conn, _metrics(conn, args.metric, ()), since_s, args.node, args.klass)
        if not points:
            raise UsageError(f"--node {args.node}: no figure of {', '.join(args.metric)} {period}")
        print(f"# {args.node}, {period}")
        print(f"{'started (UTC)':<18} {'command':<8} {'metric':<34} {'device':<12} {'value':>12} verdict")
        for p in points:
            print(f"{p.started_utc:<18} {p.command:<8} {p.metric:<34} {p.device or '-':<12} {p.value:>12.4g} "
                  f"{p.verdict or '-'}")
        return EXIT_OK
    found: list[Regression] = []
    if args.regressions or report:
        names = _metrics(conn, args.metric, TREND_METRICS)
        found = analysis.regressions(history.latest(conn, names, args.window + 1, since_s, args.klass), rules,
                                     args.window)
    if report:
        return _report(conn, args, since_s, period, found, report, shown)
    if args.regressions:
        print(f"# regressions {period}: {len(found)}")
        for r in found:
            print(f"  {r.level:<5} {r.node:<20} {r.metric:<28} {r.value:.4g} at {r.when}: {r.detail}")
        return EXIT_FAILED if found else EXIT_OK
    for metric in _metrics(conn, args.metric, ()):
        spreads = analysis.by_date(history.daily(conn, metric, since_s, args.klass))
        print(f"# {metric}, {period}: by date, one figure per node (its mean that day)")
        print(f"{'date':<11} {'nodes':>5} {'min':>10} {'p10':>10} {'median':>10} {'p90':>10} {'max':>10}")
        for s in spreads:
            print(f"{s.date:<11} {s.nodes:>5} {s.worst:>10.4g} {s.low:>10.4g} {s.median:>10.4g} {s.high:>10.4g} "
                  f"{s.best:>10.4g}")
    return EXIT_OK


def _summary(s: Summary, shown: str) -> int:
    print(f"# store {shown}: {s.runs} runs, {s.nodes} nodes, {s.figures} figures"
          + (f", {s.first_utc} to {s.last_utc}" if s.runs else ""))
    for klass, n in s.classes:
        print(f"  {klass}: {n} node{'s' * (n != 1)}")
    if s.runs:
        print("# ask: --metric NAME [--node NODE], --regressions, --report FILE.html")
    return EXIT_OK


def _report(conn: Connection, args: argparse.Namespace, since_s: float, period: str, found: list[Regression],
            report: Path, shown: str) -> int:
    from clusterbench.analyse import history as analysis
    from clusterbench.report import trends
    from clusterbench.results.documents import write_text
    from clusterbench.store import history

    plots, spreads = {}, {}
    for metric in _metrics(conn, args.metric, TREND_METRICS):
        spreads[metric] = analysis.by_date(history.daily(conn, metric, since_s, args.klass))
        nodes = {r.node: history.points(conn, [metric], since_s, r.node, args.klass)
                 for r in found if r.metric == metric}
        plots[metric] = trends.trend_plot(metric, spreads[metric], nodes)
    path = write_text(report, trends.page(shown, period, plots, spreads, found), "--report")
    print(f"# trends: {len(plots)} metrics, {len(found)} regressions -> {path}")
    return EXIT_OK


COMMAND = ToolCommand("history", "what the results store remembers: a node over time, the fleet by date, "
                      "regressions, the trends page", add_arguments, main)
