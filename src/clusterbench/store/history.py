"""The questions history asks of the store, as SQL: a metric's figures over a period, of one node or of
a class, with each node's verdict in its run; each node's latest figures; a metric by node and day.
Each question reads only what its answer uses, from an index where it can (10,000 runs of 100
nodes hold millions of figures). Answers are plain rows; what they mean is analyse.history's."""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import Column, Connection, Integer, Select, and_, cast, func, or_, select

from clusterbench.store.schema import figures, nodes, runs

DAY_S = 86400


class Point(NamedTuple):
    started_s: float
    started_utc: str
    uid: str
    command: str
    node: str
    device: str
    metric: str
    value: float
    klass: str
    verdict: str | None  # the node's in that run


def _distinct(conn: Connection, column: Column, *where: object) -> list[str]:
    """The distinct values of an indexed column's leading part, one index step each (a skip scan):
    SELECT DISTINCT would read every entry of the index."""
    first = select(func.min(column).label("v")).where(*where).cte("walk", recursive=True)
    step = select(func.min(column)).where(column > first.c.v, *where).scalar_subquery()
    walk = first.union_all(select(step).where(first.c.v.is_not(None)))
    return list(conn.execute(select(walk.c.v).where(walk.c.v.is_not(None))).scalars())


def metrics(conn: Connection) -> list[str]:
    return _distinct(conn, figures.c.metric)


def points(conn: Connection, metric_names: list[str], since_s: float | None = None, node: str | None = None,
           klass: str | None = None) -> list[Point]:
    """Every figure of these metrics since `since_s`, oldest first."""
    where = [figures.c.metric.in_(metric_names)]
    if since_s is not None:
        where.append(figures.c.started_s >= since_s)
    if node is not None:
        where.append(figures.c.node == node)
    if klass is not None:
        where.append(figures.c.klass == klass)
    query = (select(figures.c.started_s, runs.c.started_utc, runs.c.uid, runs.c.command, figures.c.node,
                    figures.c.device, figures.c.metric, figures.c.value, figures.c.klass, nodes.c.verdict)
             .join(runs, runs.c.id == figures.c.run_id)
             .outerjoin(nodes, and_(nodes.c.run_id == figures.c.run_id, nodes.c.node == figures.c.node))
             .where(*where).order_by(figures.c.started_s, runs.c.id))
    return [Point(*row) for row in conn.execute(query).all()]


def latest(conn: Connection, metric_names: list[str], count: int, since_s: float,
           klass: str | None = None) -> list[Point]:
    """Each node's newest `count` figures of each metric since `since_s`, oldest first: what a regression
    is judged on, read series by series from figures_by_node instead of the whole period."""
    found: list[Point] = []
    for metric in metric_names:
        for node in _distinct(conn, figures.c.node, figures.c.metric == metric):
            where = [figures.c.metric == metric, figures.c.node == node, figures.c.started_s >= since_s]
            if klass is not None:
                where.append(figures.c.klass == klass)
            query = (select(figures.c.started_s, runs.c.started_utc, runs.c.uid, runs.c.command, figures.c.node,
                            figures.c.device, figures.c.metric, figures.c.value, figures.c.klass)
                     .join(runs, runs.c.id == figures.c.run_id).where(*where)
                     .order_by(figures.c.started_s.desc()).limit(count))
            found += [Point(*row, None) for row in reversed(conn.execute(query).all())]
    return found


class Daily(NamedTuple):
    day: int  # days since the epoch, UTC
    node: str
    value: float  # the node's mean that day
    runs: int


def daily(conn: Connection, metric: str, since_s: float, klass: str | None = None) -> list[Daily]:
    """A metric by day and node, averaged in the database from the covering figures_by_time index."""
    day = cast(figures.c.started_s / DAY_S, Integer).label("day")
    where = [figures.c.metric == metric, figures.c.started_s >= since_s]
    if klass is not None:
        where.append(figures.c.klass == klass)
    query = (select(day, figures.c.node, func.avg(figures.c.value), func.count()).where(*where)
             .group_by(day, figures.c.node).order_by(day))
    return [Daily(*row) for row in conn.execute(query).all()]


class Summary(NamedTuple):
    runs: int
    nodes: int
    figures: int
    first_utc: str | None
    last_utc: str | None
    classes: list[tuple[str, int]]  # each hardware class and how many nodes of it


def classes(conn: Connection) -> list[str]:
    """The hardware classes the store knows nodes of."""
    return _distinct(conn, nodes.c.klass)


def summary(conn: Connection) -> Summary:
    count, first, last = conn.execute(select(func.count(runs.c.id), func.min(runs.c.started_utc),
                                             func.max(runs.c.started_utc))).one()
    n_figures = conn.execute(select(func.count()).select_from(figures)).scalar_one()
    per_class = []
    every: set[str] = set()
    for klass in classes(conn):
        names = _distinct(conn, nodes.c.node, nodes.c.klass == klass)
        per_class.append((klass, len(names)))
        every.update(names)
    return Summary(count, len(every), n_figures, first, last, per_class)


def _healthy(query: Select, klass: str, since_s: float) -> Select:
    """`query` over the figures of one class since `since_s` from runs that completed without a FAIL, of
    nodes whose own verdict was PASS or none."""
    return (query.join(runs, runs.c.id == figures.c.run_id)
            .outerjoin(nodes, and_(nodes.c.run_id == figures.c.run_id, nodes.c.node == figures.c.node))
            .where(figures.c.klass == klass, figures.c.started_s >= since_s, runs.c.status == "complete",
                   or_(runs.c.verdict.is_(None), runs.c.verdict != "FAIL"),
                   or_(nodes.c.verdict.is_(None), nodes.c.verdict == "PASS")))


class Stats(NamedTuple):
    uid: str
    metric: str
    count: int
    total: float
    low: float
    high: float


def healthy_stats(conn: Connection, klass: str, since_s: float) -> list[Stats]:
    """Each healthy run's count, sum, minimum and maximum of each metric, summed in the database."""
    v = figures.c.value
    query = select(runs.c.uid, figures.c.metric, func.count(), func.sum(v), func.min(v), func.max(v))
    return [Stats(*row) for row in conn.execute(_healthy(query, klass, since_s)
                                                .group_by(runs.c.uid, figures.c.metric)).all()]


def healthy_values(conn: Connection, klass: str, since_s: float, metric_names: list[str]) -> list[tuple[str, str, float]]:
    """(metric, node, value) of every healthy figure of these metrics: what a band's median and spread need."""
    query = select(figures.c.metric, figures.c.node, figures.c.value).where(figures.c.metric.in_(metric_names))
    return [tuple(row) for row in conn.execute(_healthy(query, klass, since_s)).all()]
