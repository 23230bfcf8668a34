"""What a fleet's history says (docs/methodology.md, "History"): a node's figure over time, the
fleet's distribution of a metric by date, the nodes whose figures fell, and baselines learned from
the healthy past. Pure functions of the store's points."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from clusterbench.analyse.metrics import Metrics
from clusterbench.analyse.rules import Rule, evaluate, load_rules
from clusterbench.nodechecks import bands
from clusterbench.nodechecks.table import BANDED
from clusterbench.results.documents import Band, Baseline, MetricStats
from clusterbench.store.queries import DAY_S, Daily, Point, Stats
from clusterbench.store.record import NODE_PREFIX

WINDOW = 5  # a node's own recent median: over its last 5 figures before the latest
MIN_OWN = 3  # fewer earlier figures than this, and a node has no recent median to fall from


def regression_rules_path() -> Path:
    return Path(str(files("clusterbench.analyse") / "regression_rules.yaml"))


def default_regression_rules() -> list[Rule]:
    return load_rules(regression_rules_path())


@dataclass(frozen=True)
class Spread:
    """One date's figures of a metric, one per node (its mean that day)."""

    date: str
    nodes: int
    low: float  # 10th percentile
    median: float
    high: float  # 90th percentile
    worst: float
    best: float


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def by_date(days: list[Daily]) -> list[Spread]:
    """The fleet's distribution of one metric by UTC date, each node counted once a day (its mean)."""
    per_day: dict[int, list[float]] = {}
    for d in days:
        per_day.setdefault(d.day, []).append(d.value)
    spreads = []
    for day, values in sorted(per_day.items()):
        date = time.strftime("%Y-%m-%d", time.gmtime(day * DAY_S))
        spreads.append(Spread(date, len(values), _quantile(values, 0.1), statistics.median(values),
                              _quantile(values, 0.9), min(values), max(values)))
    return spreads


@dataclass(frozen=True)
class Regression:
    node: str
    klass: str
    metric: str
    rule: str
    level: str
    value: float
    when: str  # the run's UTC stamp
    own: float  # the node's own recent median
    fleet: float  # the median of its class's nodes' latest figures
    detail: str


@dataclass(frozen=True)
class Judgement:
    """What --regressions found, and how much it judged: nothing judged is no verdict, never "none found"."""

    found: list[Regression]
    ready: int  # the nodes' series with a recent median of their own and a class to compare with
    judged: int  # of those, the series some rule is about


def regressions(points: list[Point], rules: list[Rule], window: int = WINDOW) -> Judgement:
    """Each node whose latest figure misses a rule against its own recent median and against its class's."""
    series: dict[tuple[str, str, str], list[Point]] = {}
    for p in points:  # oldest first: the last of each series is the node's latest
        series.setdefault((p.klass, p.metric, p.node), []).append(p)
    latest: dict[tuple[str, str], dict[str, float]] = {}
    for (klass, metric, node), ps in series.items():
        latest.setdefault((klass, metric), {})[node] = ps[-1].value
    found = []
    ready = judged = 0
    for (klass, metric, node), ps in sorted(series.items()):
        earlier = [p.value for p in ps[:-1]][-window:]
        peers = latest[(klass, metric)]
        if len(earlier) < MIN_OWN or len(peers) < 2:
            continue
        now = Metrics(values={metric: ps[-1].value})
        own = statistics.median(earlier)
        fleet = statistics.median(v for n, v in peers.items() if n != node)
        if not own or not fleet:  # nothing to fall from
            continue
        ready += 1
        # Only the rules about this metric judge it; the others say "not judged" here, which is no miss.
        against_own = {r.rule: r for r in evaluate(rules, now, {metric: own}, strict=False) if r.checked is not None}
        against_fleet = [r for r in evaluate(rules, now, {metric: fleet}, strict=False) if r.checked is not None]
        judged += bool(against_fleet)
        for r in against_fleet:
            mine = against_own.get(r.rule)
            if r.verdict in ("WARN", "FAIL") and mine is not None and mine.verdict in ("WARN", "FAIL"):
                detail = (f"{ps[-1].value:.4g}: {mine.checked:+.1%} against its own recent median {own:.4g}, "
                          f"{r.checked:+.1%} against its class's {fleet:.4g} (rule {r.rule}: change "
                          f"{r.criteria.strip()})")
                found.append(Regression(node, klass, metric, r.rule, r.verdict, ps[-1].value, ps[-1].started_utc,
                                        own, fleet, detail))
    return Judgement(found, ready, judged)


def band_metrics() -> list[str]:
    """The figures a baseline learns bands of: a node's own (section 16), as the store names them."""
    return [NODE_PREFIX + m for m in BANDED]


def baseline(stats: list[Stats], values: list[tuple[str, str, float]], klass: str,
             source: str) -> tuple[Baseline, list[Band]]:
    """A baseline of one hardware class from its healthy past (store.queries' healthy_* rows): each
    metric's mean, min and max, and each node figure's band (the median of the nodes' medians, and a
    robust spread of every healthy figure around it). A band of fewer nodes than a band judges from
    (bands.JUDGES_FROM) would judge nobody: it is left out, and returned beside the baseline to be said."""
    totals: dict[str, list[float]] = {}
    for s in stats:
        count, total, low, high = totals.setdefault(s.metric, [0, 0.0, math.inf, -math.inf])
        totals[s.metric] = [count + s.count, total + s.total, min(low, s.low), max(high, s.high)]
    metrics = {name: MetricStats(total / count, low, high, int(count))
               for name, (count, total, low, high) in sorted(totals.items())}
    per_node: dict[str, dict[str, list[float]]] = {}
    for metric, node, value in values:
        per_node.setdefault(metric.removeprefix(NODE_PREFIX), {}).setdefault(node, []).append(value)
    learned = []
    for metric, by_node in sorted(per_node.items()):
        median = statistics.median(statistics.median(v) for v in by_node.values())
        spread = bands.MAD_TO_SIGMA * statistics.median(abs(x - median) for v in by_node.values() for x in v)
        learned.append(Band(klass, metric, median, spread, len(by_node), source))
    kept = [b for b in learned if b.nodes >= bands.JUDGES_FROM]
    doc = Baseline(time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()), sorted({s.uid for s in stats}), metrics,
                   klass=klass, bands=kept, source=source)
    return doc, [b for b in learned if b.nodes < bands.JUDGES_FROM]
