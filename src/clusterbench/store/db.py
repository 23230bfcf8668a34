"""Opening the store and recording runs in it, through SQLAlchemy Core: the same statements on an
embedded SQLite file and on a team's PostgreSQL (docs/methodology.md, "The results store").

Every failure to reach or write the database (locked, full, unreachable, refused credentials) is a
StoreError of one line (exit 1); a store that is not one this clusterbench can use as it is (absent to a
reader, empty, someone else's, damaged, of another schema version) is a StoreRefused (exit 2). A reader
opens it read-only. A run, or a batch of imported runs, is recorded in one transaction: all of it, or
nothing.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import quote

from sqlalchemy import Connection, Engine, create_engine, event, insert, select
from sqlalchemy.exc import ArgumentError, IntegrityError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from clusterbench.argtypes import clipped
from clusterbench.errors import RunFailed, UsageError, one_line
from clusterbench.inputs.printable import printable
from clusterbench.secrets import masked
from clusterbench.store import fit, schema
from clusterbench.store.record import RunRecord, started_s
from clusterbench.store.values import Damaged
from clusterbench.store.where import Where

T = TypeVar("T")

# How long a writer waits for another to finish before it gives up: jobs on every node may finish at once.
BUSY_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10
FULL_BELOW = 64 * 1024  # bytes free: a write that failed there failed for want of room


class StoreError(RunFailed):
    """The store could not do what was asked: said in one line, the run folder untouched."""

    def __init__(self, message: str, busy: bool = False) -> None:
        super().__init__(message)
        self.busy = busy  # another connection held the lock: worth trying again


class StoreRefused(UsageError):
    """The store named is not one this clusterbench can use as it is: absent, empty, someone else's,
    damaged, or of another schema version. Bad input, like a damaged document (exit 2), and left as it was."""


# What to do with a damaged store: its run folders are the record, the store only their index.
MOVE_ASIDE = "move it aside and import the run folders again with clusterbench store import"
# How often a batch is tried again after another importer recorded one of its runs first (PostgreSQL, where
# the uid check and the insert are not under one lock): each try finds the winner's runs already there.
RACES = 5
_UIDS_PER_QUESTION = 500  # uids in one IN (...): well inside SQLite's limit on parameters


# SQLite's "no such table: figures", PostgreSQL's 'relation "figures" does not exist', and their columns'.
_LOST = re.compile(r'no such (?P<kind>table|column): (?P<name>\S+)'
                   r'|(?P<pg>relation|column) "(?P<pgname>[^"]+)" does not exist')


def _busy(e: BaseException) -> bool:
    return "database is locked" in str(getattr(e, "orig", None) or e).lower()


def _why(e: BaseException) -> tuple[str, bool]:
    """The database's own reason, in one line, with what it means for a store; and whether it is the
    store's own damage (bad input) rather than a failure to reach or write it."""
    orig = getattr(e, "orig", None) or e
    words = masked(" ".join(str(orig).split()))  # a driver's message may quote the URL it was given
    words = re.sub(r"\(Background on this error at: [^)]*\)", "", words).strip()
    lower = words.lower()
    if "file is not a database" in lower or "malformed" in lower:
        return f"damaged or not an SQLite database ({words}); {MOVE_ASIDE}", True
    lost = _LOST.search(words)
    if lost:  # a table or column dropped while the command ran (one missing at the start is found by _bring_up)
        kind = "table" if lost["pg"] == "relation" else lost["kind"] or lost["pg"]
        return f"damaged: {kind} {lost['name'] or lost['pgname']} is missing; {MOVE_ASIDE}", True
    if "database or disk is full" in lower:
        return "the disk is full; nothing of this run was recorded", False
    if "database is locked" in lower:
        return f"locked by another writer for more than {BUSY_TIMEOUT_S:g} s; nothing of this run was recorded", False
    if "fatal:" in lower:  # psycopg: "connection to server at ... failed: FATAL:  password authentication ..."
        words = words[lower.index("fatal:") + 6:].strip()
    words = re.split(r" LINE \d+:", words)[0].strip()  # PostgreSQL's quote of the statement: not the reason
    return words[:300] or type(orig).__name__, False


class Store:
    def __init__(self, where: Where, engine: Engine, write: bool = True) -> None:
        self.where, self.engine, self.write = where, engine, write

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except (StoreError, StoreRefused):
            raise
        except Damaged as e:
            raise StoreRefused(f"store {self.where.shown}: {e}; {MOVE_ASIDE}") from None
        except (SQLAlchemyError, sqlite3.Error, OSError) as e:
            why, refused = _why(e)
            if refused:
                raise StoreRefused(f"store {self.where.shown}: {why}") from None
            if "disk i/o error" in why.lower() and self._disk_full():  # SQLite's word for a failed write
                why = f"the disk is full ({why}); nothing of this run was recorded"
            raise StoreError(f"store {self.where.shown}: {why}", _busy(e)) from None

    def retrying(self, action: Callable[[], T]) -> T:
        """`action`, tried again while SQLite says another connection holds the lock. Its busy wait does
        not cover every case: it answers at once where waiting could deadlock (a read lock that wants to
        write, a switch to the write-ahead log), and a new store's first writers meet just there."""
        give_up = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                return action()
            except StoreError as e:
                if not e.busy or time.monotonic() > give_up:
                    raise
            time.sleep(random.uniform(0.01, 0.1))

    def _disk_full(self) -> bool:
        try:
            return self.where.path is not None and shutil.disk_usage(self.where.path.parent).free < FULL_BELOW
        except OSError:
            return False

    @contextmanager
    def writing(self) -> Iterator[Connection]:
        """A transaction that takes the write lock at its start (SQLite's BEGIN IMMEDIATE): two writers
        queue for it instead of one failing halfway when both try to upgrade a read."""
        with self._errors(), self.engine.connect() as conn:
            conn.execution_options(clusterbench_write=True)
            with conn.begin():
                yield conn

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        with self._errors(), self.engine.connect() as conn, conn.begin():
            yield conn

    def record(self, run: RunRecord) -> bool:
        """Record `run` and its figures; False when a run of its uid is already there."""
        return self.record_many([run])[0]

    def record_many(self, runs: list[RunRecord]) -> list[bool]:
        """Record the runs in one transaction, all or none; for each, whether it was new (False: a run of
        its uid was there already, or earlier in `runs`). A run the store's readers could not read back is
        refused, and nothing recorded."""
        for run in runs:
            why = fit.refusal(run)
            if why is not None:
                raise StoreRefused(f"store {self.where.shown}: run {clipped(repr(run.uid))} not recorded: {why}")
        tries = 1
        while True:
            try:
                return self.retrying(lambda: self._record_many(runs))
            except StoreError as e:
                if not isinstance(e.__context__, IntegrityError) or tries == RACES:
                    raise
            tries += 1

    def _record_many(self, records: list[RunRecord]) -> list[bool]:
        with self.writing() as conn:
            uids = sorted({r.uid for r in records})
            there: set[str] = set()
            for i in range(0, len(uids), _UIDS_PER_QUESTION):
                chunk = uids[i:i + _UIDS_PER_QUESTION]
                there.update(conn.execute(select(schema.runs.c.uid).where(schema.runs.c.uid.in_(chunk))).scalars())
            new = []
            for r in records:
                new.append(r.uid not in there)
                there.add(r.uid)
            fresh = [r for r, is_new in zip(records, new) if is_new]
            if fresh:
                _insert(conn, fresh)
        return new

    def write_ahead(self) -> None:
        """Readers go on while a node's job writes: SQLite's write-ahead log. The mode stays with the file,
        and switching takes the file whole, so it is asked for by a writer only, once the file is known to
        be a store (or new), and only where it is not in that mode yet."""
        with self._errors():
            raw = self.engine.raw_connection()
            try:
                conn = raw.driver_connection
                if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    conn.execute("PRAGMA journal_mode=WAL")
            finally:
                raw.close()

    def close(self) -> None:
        self.engine.dispose()


def _insert(conn: Connection, records: list[RunRecord]) -> None:
    now = time.time()
    whens = [started_s(r.started_utc) for r in records]
    ids = conn.execute(insert(schema.runs).returning(schema.runs.c.id, sort_by_parameter_order=True), [
        {"uid": r.uid, "command": r.command, "started_utc": r.started_utc, "started_s": when,
         "finished_utc": r.finished_utc, "status": r.status, "verdict": r.verdict, "host": r.host,
         # The reason is free text that no reader prints: kept, with what is not printable escaped.
         "folder": r.folder, "reason": None if r.reason is None else printable(r.reason), "recorded_s": now}
        for r, when in zip(records, whens)]).scalars().all()
    node_rows, figure_rows = [], []
    for run_id, when, run in zip(ids, whens, records):
        # The nodes a run judged or knows the class of; the job's host list (node[01-16]) is none of them.
        classes = {**{f.node: f.klass for f in run.figures}, **run.node_classes}
        node_rows += [{"run_id": run_id, "node": n, "klass": classes.get(n, "?"), "verdict": run.node_verdicts.get(n)}
                      for n in sorted({*run.node_verdicts, *run.node_classes})]
        figure_rows += [{"run_id": run_id, "started_s": when, "node": f.node, "device": f.device, "metric": f.metric,
                         "value": f.value, "klass": f.klass} for f in run.figures]
    if node_rows:
        conn.execute(insert(schema.nodes), node_rows)
    if figure_rows:
        conn.execute(insert(schema.figures), figure_rows)


def _engine(where: Where, write: bool) -> Engine:
    if where.postgres:
        connect_args: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT_S}
        if not write:  # every transaction of a reader's session is read-only: PostgreSQL itself refuses a write
            connect_args["options"] = "-c default_transaction_read_only=on"
        try:
            return create_engine(where.url, poolclass=NullPool, connect_args=connect_args)
        except (ArgumentError, ValueError) as e:
            raise StoreRefused(f"store {where.shown}: not a URL of a database ({one_line(e)})") from None
    path = str(where.path)
    # A reader opens the file read-only (an SQLite URI, the path escaped): it cannot create, migrate or
    # re-mode it, whatever it is. The file is named to sqlite3 directly, never parsed as a URL.
    ro = f"file:{quote(path)}?mode=ro"

    def connect() -> sqlite3.Connection:
        if write:
            return sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        return sqlite3.connect(ro, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)

    engine = create_engine("sqlite://", creator=connect, poolclass=NullPool)

    @event.listens_for(engine, "connect")
    def _connect(dbapi: Any, record: Any) -> None:
        dbapi.isolation_level = None  # transactions begin where we say, and how (below)
        if not write:
            dbapi.execute("PRAGMA query_only = ON")

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("clusterbench_write")
                             else "BEGIN")

    return engine


def open_store(where: Where, write: bool = True) -> Store:
    """The store at `where`. write=True: brought up to this version's schema (built where it is new).
    write=False, for a command that only reads: opened read-only, and refused in one line where it is
    not this version's store, for a reader never builds, migrates or re-modes one."""
    if where.path is not None:
        _check_file(where, write)
    store = Store(where, _engine(where, write), write)
    try:
        store.retrying(lambda: _bring_up(store))
    except BaseException:
        store.close()
        raise
    return store


def _check_file(where: Where, write: bool) -> None:
    """An SQLite store's file as it stands: only a plain file is one (SQLite would wait forever on a FIFO)."""
    path = where.path
    try:
        st = path.stat()
    except FileNotFoundError:
        if not write:
            raise StoreRefused(f"store {where.shown}: nothing recorded there yet (no such file)") from None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"store {where.shown}: cannot create its folder ({e.strerror or e})") from None
        return
    except OSError as e:
        raise StoreRefused(f"store {where.shown}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise StoreRefused(f"store {where.shown}: not a file; name the database file")
    if not write and st.st_size == 0:
        raise StoreRefused(f"store {where.shown}: an empty file; nothing recorded there yet")
    if not write and not os.access(path, os.R_OK):
        raise StoreRefused(f"store {where.shown}: cannot read it (permission denied)")


def _bring_up(store: Store) -> None:
    """The store's schema checked, and for a writer migrated to this version where it is older."""
    where = store.where
    with store.reading() as conn:
        # The tables before the version: a store another importer builds meanwhile shows all of them and its version
        # row at once, and each statement here may see a newer commit than the last (PostgreSQL's read committed).
        others = schema.foreign_tables(conn)
        found = schema.version(conn)
        others = others if found == 0 else []
        gone = schema.missing(conn, found)
    if found == 0 and others and set(others) <= set(schema.metadata.tables):  # ours, but for its version row's table
        gone = f"table {schema.meta.name}"
    if gone is not None:  # every question would fail on it, after a writer had measured a run for nothing
        raise StoreRefused(f"store {where.shown}: damaged: its {gone} is missing; {MOVE_ASIDE}")
    if found == 0 and not store.write:  # nothing to build for a reader
        raise StoreRefused(_not_a_store(where, others))
    if found == 0 and others and not where.postgres:  # someone else's SQLite file: a store lives in its own
        raise StoreRefused(_not_a_store(where, others) + "; clusterbench records only in a file of its own")
    if found > schema.SCHEMA_VERSION:
        raise StoreRefused(_newer(where, found))
    if not store.write:
        if found < schema.SCHEMA_VERSION:
            raise StoreRefused(_older(where, found))
        return
    if not where.postgres:
        store.write_ahead()
    if found < schema.SCHEMA_VERSION:
        with store.writing() as conn:
            found = schema.version(conn)  # another process may have built it meanwhile
            if found > schema.SCHEMA_VERSION:
                raise StoreRefused(_newer(where, found))
            schema.migrate(conn)


def _not_a_store(where: Where, tables: list[str]) -> str:
    if not tables:
        return f"store {where.shown}: nothing recorded there yet (no clusterbench tables)"
    shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
    if where.postgres:
        return f"store {where.shown}: nothing recorded there yet (no clusterbench tables; it has {shown})"
    return f"store {where.shown}: not a clusterbench results store (an SQLite database of other tables: {shown})"


def _newer(where: Where, found: int) -> str:
    return (f"store {where.shown}: its schema is version {found}, newer than this clusterbench knows "
            f"({schema.SCHEMA_VERSION}); upgrade clusterbench to use it (a store is never downgraded)")


def _older(where: Where, found: int) -> str:
    return (f"store {where.shown}: its schema is version {found}, older than this clusterbench's "
            f"({schema.SCHEMA_VERSION}), and reading never changes a store: bring it up to date first with "
            f"clusterbench store upgrade --store {where.shown}")
