"""The questions history asks of the store, as SQL: a metric's figures over a period, of one node or of
a class, with each node's verdict in its run; each node's latest figures; a metric by node and day.
Each question reads only what its answer uses, from an index where it can (10,000 runs of 100
nodes hold millions of figures). Answers are plain rows, each value checked as it is read (store.values):
a question that sums or averages in the database first asks whether its figures are sound. What the
answers mean is analyse.history's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import Column, Connection, Integer, Select, and_, cast, exists, func, or_, select

from clusterbench.store.schema import figures, nodes, runs
from clusterbench.store.values import count, number, stamp, text, unsound

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


_POINT = (figures.c.started_s, runs.c.started_utc, runs.c.uid, runs.c.command, figures.c.node, figures.c.device,
          figures.c.metric, figures.c.value, figures.c.klass)


def _point(row: Sequence[Any], verdict: Any = None) -> Point:
    started, utc, uid, command, node, device, metric, value, klass = row[:9]
    c = figures.c
    return Point(number(started, c.started_s), stamp(utc, runs.c.started_utc), text(uid, runs.c.uid),
                 text(command, runs.c.command), text(node, c.node), text(device, c.device), text(metric, c.metric),
                 number(value, c.value), text(klass, c.klass), text(verdict, nodes.c.verdict, nullable=True))


def sound(conn: Connection, *where: object) -> None:
    """Damaged where a figure these conditions pick holds no finite number, or no finite instant: what a
    question that sums or averages in the database asks first (SQL's avg would take text for 0)."""
    dialect = conn.dialect.name
    bad = conn.execute(select(figures.c.value, figures.c.started_s)
                       .where(*where, or_(unsound(figures.c.value, dialect), unsound(figures.c.started_s, dialect)))
                       .limit(1)).first()
    if bad is not None:
        number(bad[1], figures.c.started_s)
        number(bad[0], figures.c.value)


def _distinct(conn: Connection, column: Column, *where: object) -> list[str]:
    """The distinct values of an indexed column's leading part, one index step each (a skip scan):
    SELECT DISTINCT would read every entry of the index."""
    first = select(func.min(column).label("v")).where(*where).cte("walk", recursive=True)
    step = select(func.min(column)).where(column > first.c.v, *where).scalar_subquery()
    walk = first.union_all(select(step).where(first.c.v.is_not(None)))
    return [text(v, column) for v in conn.execute(select(walk.c.v).where(walk.c.v.is_not(None))).scalars()]


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
    query = (select(*_POINT, nodes.c.verdict)
             .join(runs, runs.c.id == figures.c.run_id)
             .outerjoin(nodes, and_(nodes.c.run_id == figures.c.run_id, nodes.c.node == figures.c.node))
             .where(*where).order_by(figures.c.started_s, runs.c.id))
    return [_point(row, row[9]) for row in conn.execute(query).all()]


def latest(conn: Connection, metric_names: list[str], newest: int, since_s: float,
           klass: str | None = None) -> list[Point]:
    """Each node's newest `newest` figures of each metric since `since_s`, oldest first: what a regression
    is judged on, read series by series from figures_by_node instead of the whole period."""
    found: list[Point] = []
    for metric in metric_names:
        for node in _distinct(conn, figures.c.node, figures.c.metric == metric):
            where = [figures.c.metric == metric, figures.c.node == node, figures.c.started_s >= since_s]
            if klass is not None:
                where.append(figures.c.klass == klass)
            query = (select(*_POINT).join(runs, runs.c.id == figures.c.run_id).where(*where)
                     .order_by(figures.c.started_s.desc()).limit(newest))
            found += [_point(row) for row in reversed(conn.execute(query).all())]
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
    sound(conn, *where)
    query = (select(day, figures.c.node, func.avg(figures.c.value), func.count()).where(*where)
             .group_by(day, figures.c.node).order_by(day))
    return [Daily(count(d, figures.c.started_s), text(node, figures.c.node), number(mean, figures.c.value),
                  count(n, figures.c.run_id)) for d, node, mean, n in conn.execute(query).all()]


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
    n_runs, first, last = conn.execute(select(func.count(runs.c.id), func.min(runs.c.started_utc),
                                              func.max(runs.c.started_utc))).one()
    first, last = stamp(first, runs.c.started_utc, nullable=True), stamp(last, runs.c.started_utc, nullable=True)
    n_figures = conn.execute(select(func.count()).select_from(figures)).scalar_one()
    per_class = []
    every: set[str] = set()
    for klass in classes(conn):
        names = _distinct(conn, nodes.c.node, nodes.c.klass == klass)
        per_class.append((klass, len(names)))
        every.update(names)
    return Summary(n_runs, len(every), n_figures, first, last, per_class)


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
    sound(conn, figures.c.klass == klass, figures.c.started_s >= since_s)
    query = select(runs.c.uid, figures.c.metric, func.count(), func.sum(v), func.min(v), func.max(v))
    return [Stats(text(uid, runs.c.uid), text(metric, figures.c.metric), count(n, figures.c.run_id), number(total, v),
                  number(low, v), number(high, v))
            for uid, metric, n, total, low, high in conn.execute(_healthy(query, klass, since_s)
                                                                 .group_by(runs.c.uid, figures.c.metric)).all()]


def healthy_values(conn: Connection, klass: str, since_s: float, metric_names: list[str]) -> list[tuple[str, str, float]]:
    """(metric, node, value) of every healthy figure of these metrics: what a band's median and spread need."""
    query = select(figures.c.metric, figures.c.node, figures.c.value).where(figures.c.metric.in_(metric_names))
    c = figures.c
    return [(text(metric, c.metric), text(node, c.node), number(value, c.value))
            for metric, node, value in conn.execute(_healthy(query, klass, since_s)).all()]


class RunRow(NamedTuple):
    started_utc: str
    command: str
    nodes: int  # the nodes it judged or knows the class of
    status: str
    verdict: str | None
    uid: str
    folder: str | None


def run_list(conn: Connection, since_s: float, last: int, node: str | None = None,
             klass: str | None = None) -> list[RunRow]:
    """The newest `last` runs since `since_s`, newest first; of one node, or with a node of one class."""
    where = [runs.c.started_s >= since_s]
    if node is not None:
        where.append(exists().where(nodes.c.run_id == runs.c.id, nodes.c.node == node))
    if klass is not None:
        where.append(exists().where(nodes.c.run_id == runs.c.id, nodes.c.klass == klass))
    n_nodes = select(func.count()).where(nodes.c.run_id == runs.c.id).scalar_subquery()
    query = (select(runs.c.started_s, runs.c.started_utc, runs.c.command, n_nodes, runs.c.status, runs.c.verdict,
                    runs.c.uid, runs.c.folder)
             .where(*where).order_by(runs.c.started_s.desc(), runs.c.id.desc()).limit(last))
    c = runs.c
    found = []
    for started, utc, command, n, status, verdict, uid, folder in conn.execute(query).all():
        number(started, c.started_s)
        found.append(RunRow(stamp(utc, c.started_utc), text(command, c.command), count(n, nodes.c.node),
                            text(status, c.status), text(verdict, c.verdict, nullable=True), text(uid, c.uid),
                            text(folder, c.folder, nullable=True)))
    return found


def knows_node(conn: Connection, node: str) -> bool:
    return conn.execute(select(nodes.c.node).where(nodes.c.node == node).limit(1)).first() is not None
