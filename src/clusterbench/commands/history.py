"""`clusterbench history`: what the results store remembers (docs/methodology.md, "History").

    history                                 what the store holds
    history --runs [--last N] [--node N]    the runs recorded, latest first
    history --node N --metric M             a node's figure over time
    history --metric M                      the fleet's distribution of a metric by date
    history --regressions [--rules YAML]    nodes whose latest figure fell against their own and their class's
    history --report FILE.html              the trends page

A period (--since, default 30d) and a hardware class (--class) narrow every question. Exit 1 when
--regressions finds one, so a cron job or a CI step can act on it; exit 2 when it had nothing to judge
(no figures there, or none with a past and a class to judge against), which is no "none found". The
store is read read-only: history never builds, migrates or re-modes it.
"""

from __future__ import annotations

import argparse
import fnmatch
import time
from pathlib import Path
from typing import TYPE_CHECKING

from clusterbench import argtypes
from clusterbench.errors import EXIT_FAILED, EXIT_OK, UsageError
from clusterbench.publish import add_store_argument
from clusterbench.runtime.command import ToolCommand
from clusterbench.store.where import resolve

if TYPE_CHECKING:  # SQLAlchemy and the analysis load only when a question is asked
    from sqlalchemy import Connection

    from clusterbench.analyse.history import Judgement, Regression
    from clusterbench.analyse.rules import Rule
    from clusterbench.store.queries import Point, Summary

DEFAULT_SINCE = "30d"
DEFAULT_LAST = 20  # runs --runs lists: a screenful
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
    p.add_argument("--runs", action="store_true", help="the runs recorded, latest first: time, command, nodes, "
                   "verdict, uid, folder")
    p.add_argument("--last", type=argtypes.whole(1, 100_000), metavar="N",
                   help=f"with --runs: how many (default {DEFAULT_LAST})")
    p.add_argument("--regressions", action="store_true",
                   help="nodes whose latest figure fell against their own recent median and their class's")
    p.add_argument("--rules", type=Path, metavar="YAML",
                   help="what a regression is (default: the shipped regression_rules.yaml)")
    p.add_argument("--window", type=argtypes.whole(1, 1000), default=5,
                   help="runs before the latest that a node's own recent median is taken over (default %(default)d)")
    p.add_argument("--report", type=Path, metavar="FILE.html", help="write the trends page there")
    p.add_argument("--overwrite", action="store_true", help="replace the --report file when it exists")


def main(args: argparse.Namespace) -> int:
    _check_combination(args)
    report = args.report  # checked with every output before the command began (results/outputs.py)
    rules = _rules(args.rules) if args.regressions or report else None
    where = resolve(args.store)
    if where is None:
        raise UsageError("--store off: there is no store to read")
    since_s = time.time() - (args.since or argtypes.age(DEFAULT_SINCE))
    period = f"since {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(since_s))}"
    from clusterbench.store.db import open_store  # SQLAlchemy: only once the question and the store are sound

    store = open_store(where, write=False)
    try:
        with store.reading() as conn:
            return _answer(conn, args, since_s, period, rules, report, where.shown)
    finally:
        store.close()


def _check_combination(args: argparse.Namespace) -> None:
    from clusterbench.analyse.history import MIN_OWN

    if args.runs and (args.metric or args.regressions or args.report):
        raise UsageError("--runs lists the runs; ask for --metric, --regressions or --report on their own")
    if args.last is not None and not args.runs:
        raise UsageError("--last goes with --runs: how many runs to list")
    if args.node and not (args.metric or args.runs):
        raise UsageError("--node needs --metric: which of its figures to follow (or --runs: its runs)")
    if (args.regressions or args.report) and args.window < MIN_OWN:
        raise UsageError(f"--window {args.window}: a node's own recent median needs at least {MIN_OWN} figures "
                         "before its latest")


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
    from clusterbench.store import queries

    known = queries.metrics(conn)
    wanted = patterns or list(default)
    chosen = [m for m in known if any(fnmatch.fnmatchcase(m, p) for p in wanted)]
    if patterns and not chosen:
        near = [m for m in known if any(p.split(".")[0] == m.split(".")[0] for p in patterns)][:5]
        raise UsageError(f"--metric {', '.join(patterns)}: the store has no such metric"
                         + (f" (it has {', '.join(near)}, ...)" if near else ""))
    return chosen


def _answer(conn: Connection, args: argparse.Namespace, since_s: float, period: str, rules: list[Rule] | None,
            report: Path | None, shown: str) -> int:
    from clusterbench.store import queries

    if args.klass is not None:
        _known_class(conn, args.klass)
    if args.runs:
        return _runs(conn, args, since_s, period)
    if not (args.metric or args.regressions or report):
        return _summary(queries.summary(conn), shown)
    if args.node:
        points = queries.points(conn, _metrics(conn, args.metric, ()), since_s, args.node, args.klass)
        if not points:
            raise UsageError(f"--node {args.node}: no figure of {', '.join(args.metric)} {period}")
        print(f"# {args.node}, {period}")
        print(f"{'started (UTC)':<18} {'command':<8} {'metric':<34} {'device':<12} {'value':>12} verdict")
        for p in points:
            print(f"{p.started_utc:<18} {p.command:<8} {p.metric:<34} {p.device or '-':<12} {p.value:>12.4g} "
                  f"{p.verdict or '-'}")
        return EXIT_OK
    if report:
        found = _judge(conn, args, since_s, period, rules).found
        return _report(conn, args, since_s, period, found, report, shown)
    if args.regressions:
        judgement = _judge(conn, args, since_s, period, rules)
        print(f"# regressions {period}: {len(judgement.found)}, of {judgement.judged} series judged "
              "(a node's figure over time)")
        for r in judgement.found:
            print(f"  {r.level:<5} {r.node:<20} {r.metric:<28} {r.value:.4g} at {r.when}: {r.detail}")
        return EXIT_FAILED if judgement.found else EXIT_OK
    return _by_date(conn, args, since_s, period)


def _judge(conn: Connection, args: argparse.Namespace, since_s: float, period: str, rules: list[Rule]) -> Judgement:
    """Each node's latest figures judged by the rules; with --regressions, nothing judged is refused (the trends
    page still draws the fleet)."""
    from clusterbench.analyse import history
    from clusterbench.store import queries

    names = _metrics(conn, args.metric, TREND_METRICS)
    points = queries.latest(conn, names, args.window + 1, since_s, args.klass)
    judgement = history.regressions(points, rules, args.window)
    if args.regressions:
        _judged_something(judgement, points, names, args, period)
    return judgement


def _of_class(args: argparse.Namespace) -> str:
    return f" of class {args.klass}" if args.klass else ""


def _known_class(conn: Connection, klass: str) -> None:
    from clusterbench.store import queries

    known = [k for k in queries.classes(conn) if k != "?"]
    if klass not in known:
        raise UsageError(f"--class {klass!r}: the store knows {', '.join(map(repr, known)) or 'no class'}")


def _judged_something(judgement: Judgement, points: list[Point], names: list[str], args: argparse.Namespace,
                      period: str) -> None:
    """Nothing judged is its own outcome (exit 2), said with what was missing: never "no regression"."""
    from clusterbench.analyse.history import MIN_OWN

    wanted = names or args.metric or list(TREND_METRICS)
    shown = ", ".join(wanted[:5]) + (", ..." if len(wanted) > 5 else "")
    if not points:
        raise UsageError(f"nothing to judge: no figures of {shown}{_of_class(args)} {period}")
    if not judgement.ready:
        raise UsageError(f"nothing to judge: no node has {MIN_OWN + 1} figures of one metric{_of_class(args)} "
                         f"{period} beside another node of its class (each is judged against its own recent "
                         "median and its class's)")
    if not judgement.judged:
        rules = f"--rules {args.rules}" if args.rules else "the shipped regression rules"
        raise UsageError(f"nothing to judge: no rule of {rules} is about {shown}")


def _by_date(conn: Connection, args: argparse.Namespace, since_s: float, period: str) -> int:
    from clusterbench.analyse import history
    from clusterbench.store import queries

    answered = {metric: history.by_date(queries.daily(conn, metric, since_s, args.klass))
                for metric in _metrics(conn, args.metric, ())}
    if not any(answered.values()):
        raise UsageError(f"--metric {', '.join(args.metric)}: no figures{_of_class(args)} {period}")
    for metric, spreads in answered.items():
        print(f"# {metric}, {period}: by date, one figure per node (its mean that day)")
        print(f"{'date':<11} {'nodes':>5} {'min':>10} {'p10':>10} {'median':>10} {'p90':>10} {'max':>10}")
        for s in spreads:
            print(f"{s.date:<11} {s.nodes:>5} {s.worst:>10.4g} {s.low:>10.4g} {s.median:>10.4g} {s.high:>10.4g} "
                  f"{s.best:>10.4g}")
    return EXIT_OK


def _runs(conn: Connection, args: argparse.Namespace, since_s: float, period: str) -> int:
    """The runs recorded, latest first. A list judges nothing: an empty one is said, and is no error, unless
    it is empty because --node names a node the store has never heard of (a typo)."""
    from clusterbench.store import queries

    rows = queries.run_list(conn, since_s, args.last or DEFAULT_LAST, args.node, args.klass)
    of = (f" of node {args.node}" if args.node else "") + _of_class(args)
    if not rows:
        if args.node and not queries.knows_node(conn, args.node):
            raise UsageError(f"--node {args.node}: the store knows no such node")
        print(f"# no runs recorded{of} {period}")
        return EXIT_OK
    print(f"# runs{of} {period}, latest first: the last {len(rows)}")
    print(f"{'started (UTC)':<18} {'command':<8} {'nodes':>5} {'verdict':<11} {'uid':<32} folder")
    for r in rows:
        # A run that did not complete says how it ended beside its verdict: failed, interrupted.
        verdict = (r.verdict or "-") + ("" if r.status == "complete" else f"/{r.status}")
        print(f"{r.started_utc:<18} {r.command:<8} {r.nodes:>5} {verdict:<11} {r.uid:<32} {r.folder or '-'}")
    return EXIT_OK


def _summary(s: Summary, shown: str) -> int:
    print(f"# store {shown}: {s.runs} runs, {s.nodes} nodes, {s.figures} figures"
          + (f", {s.first_utc} to {s.last_utc}" if s.runs else ""))
    for klass, n in s.classes:
        print(f"  {klass}: {n} node{'s' * (n != 1)}")
    if s.runs:
        print("# ask: --runs, --metric NAME [--node NODE], --regressions, --report FILE.html")
    return EXIT_OK


def _report(conn: Connection, args: argparse.Namespace, since_s: float, period: str, found: list[Regression],
            report: Path, shown: str) -> int:
    from clusterbench.analyse import history
    from clusterbench.report import trends
    from clusterbench.results.documents import write_text
    from clusterbench.store import queries

    plots, spreads = {}, {}
    names = _metrics(conn, args.metric, TREND_METRICS)
    for metric in names:
        spreads[metric] = history.by_date(queries.daily(conn, metric, since_s, args.klass))
    if not any(spreads.values()):  # a page of empty plots would look like a quiet fleet
        raise UsageError(f"--report {report}: nothing to draw: no figures of "
                         f"{', '.join(names or args.metric or TREND_METRICS)}{_of_class(args)} {period}")
    for metric in names:
        nodes = {r.node: queries.points(conn, [metric], since_s, r.node, args.klass)
                 for r in found if r.metric == metric}
        plots[metric] = trends.trend_plot(metric, spreads[metric], nodes)
    path = write_text(report, trends.page(shown, period, plots, spreads, found), "--report")
    print(f"# trends: {len(plots)} metrics, {len(found)} regressions -> {path}")
    return EXIT_OK


COMMAND = ToolCommand("history", "what the results store remembers: a node over time, the fleet by date, "
                      "regressions, the trends page", add_arguments, main)
