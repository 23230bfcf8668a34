"""The store's tables, and the migrations that build them version by version.

The version is a row of clusterbench_meta. Opening a store brings it up to SCHEMA_VERSION one
migration at a time, inside one transaction (so two processes opening a new store at once build it
once); a store of a newer version is refused, never downgraded. A migration is written once and
never changed: a later change of a table is a new migration.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    Column,
    Connection,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    insert,
    select,
    text,
)

from clusterbench.store.values import Damaged, held

SCHEMA_VERSION = 2

metadata = MetaData()

meta = Table("clusterbench_meta", metadata,
             Column("key", String(32), primary_key=True),
             Column("value", String(64), nullable=False))

runs = Table("runs", metadata,
             Column("id", Integer, primary_key=True, autoincrement=True),
             Column("uid", String(64), nullable=False, unique=True),
             Column("command", String(32), nullable=False),
             Column("started_utc", String(32), nullable=False),
             Column("started_s", Float, nullable=False),  # the same instant as seconds: what history sorts on
             Column("finished_utc", String(32)),
             Column("status", String(16), nullable=False),
             Column("verdict", String(8)),
             Column("host", String(255), nullable=False),
             Column("folder", Text),
             Column("reason", Text),
             Column("recorded_s", Float, nullable=False),
             Index("runs_by_time", "started_s"))

figures = Table("figures", metadata,
                Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
                Column("started_s", Float, nullable=False),  # the run's, kept here so history needs no join
                Column("node", String(255), nullable=False),
                Column("device", String(255), nullable=False),
                Column("metric", String(255), nullable=False),
                Column("value", Float, nullable=False),
                Column("klass", String(255), nullable=False),
                # A node's series, newest first (history --node, --regressions).
                Index("figures_by_node", "metric", "node", "started_s"),
                # Covering: the fleet by date and a baseline read a period of a metric from the index alone.
                Index("figures_by_time", "metric", "started_s", "klass", "node", "value"))

# Version 2: each node's verdict in each run, so that a baseline takes only healthy nodes' figures and
# a node that measured nothing (it died) is still on record.
nodes = Table("nodes", metadata,
              Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
              Column("node", String(255), primary_key=True),
              Column("klass", String(255), nullable=False),
              Column("verdict", String(8)),
              Index("nodes_by_class", "klass", "node"))


def _v1(conn: Connection) -> None:
    meta.create(conn)
    runs.create(conn)
    figures.create(conn)


def _v2(conn: Connection) -> None:
    nodes.create(conn)
    # A version-1 store knew each node only by its figures: their class, and the run's verdict.
    rows = conn.execute(select(figures.c.run_id, figures.c.node, figures.c.klass, runs.c.verdict)
                        .join(runs, runs.c.id == figures.c.run_id).distinct()).all()
    seen: set[tuple[int, str]] = set()
    values = []
    for run_id, node, klass, verdict in rows:
        if (run_id, node) not in seen:
            seen.add((run_id, node))
            values.append({"run_id": run_id, "node": node, "klass": klass, "verdict": verdict})
    if values:
        conn.execute(insert(nodes), values)


MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _v1, 2: _v2}


# A version past this is no version any clusterbench wrote: a damaged row, not a newer store.
_VERSION_MAX = 9999


def version(conn: Connection) -> int:
    """The store's schema version; 0 for a database that holds no store. A version row that is not a whole
    number from 1 is damage (values.Damaged), never taken for 0: that would build the store over it."""
    if not conn.dialect.has_table(conn, meta.name):
        return 0
    row = conn.execute(select(meta.c.value).where(meta.c.key == "schema_version")).first()
    if row is None:
        raise Damaged("damaged: clusterbench_meta has no schema_version row")
    found = row[0]
    if isinstance(found, str) and found.isascii() and found.isdigit() and len(found) <= len(str(_VERSION_MAX)):
        found = int(found)
    if isinstance(found, bool) or not isinstance(found, int) or not 1 <= found <= _VERSION_MAX:
        raise held(meta.c.value, found, f"not a schema version: a whole number from 1 to {_VERSION_MAX}")
    return found


# The tables of each version: a store of that version without one of them, or of one of their columns, is damaged.
TABLES = {1: (meta, runs, figures), 2: (meta, runs, figures, nodes)}


def missing(conn: Connection, found: int) -> str | None:
    """What of its version's tables a store lacks ("table nodes", "column figures.value"), or None."""
    present = set(conn.dialect.get_table_names(conn))
    for table in TABLES.get(found, ()):
        if table.name not in present:
            return f"table {table.name}"
        columns = {c["name"] for c in conn.dialect.get_columns(conn, table.name)}
        lost = [c.name for c in table.columns if c.name not in columns]
        if lost:
            return f"column {table.name}.{lost[0]}"
    return None


def foreign_tables(conn: Connection) -> list[str]:
    """The tables of a database that holds no store: someone else's, which clusterbench leaves alone."""
    return sorted(conn.dialect.get_table_names(conn))


def migrate(conn: Connection, target: int = SCHEMA_VERSION) -> int:
    """Bring the store from its version up to `target`; the version it was at."""
    if conn.dialect.name == "postgresql":  # one migrator at a time; the others wait, then find it done
        conn.execute(text("SELECT pg_advisory_xact_lock(7243100201)"))
    found = version(conn)
    for step in range(found + 1, target + 1):
        MIGRATIONS[step](conn)
        if step == 1:
            conn.execute(insert(meta).values(key="schema_version", value="1"))
        else:
            conn.execute(meta.update().where(meta.c.key == "schema_version").values(value=str(step)))
    return found
