"""Opening the store and recording runs in it, through SQLAlchemy Core: the same statements on an
embedded SQLite file and on a team's PostgreSQL (docs/methodology.md, "The results store").

Every failure of the database (locked, full, damaged, unreachable, refused credentials, a newer
schema) is a StoreError of one line. A run is recorded in one transaction: all of it, or nothing.
"""

from __future__ import annotations

import random
import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, insert, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from clusterbench.errors import RunFailed
from clusterbench.store import schema
from clusterbench.store.record import RunRecord, started_s
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


def _busy(e: BaseException) -> bool:
    return "database is locked" in str(getattr(e, "orig", None) or e).lower()


def _why(e: BaseException) -> str:
    """The database's own reason, in one line, with what it means for a store."""
    orig = getattr(e, "orig", None) or e
    words = " ".join(str(orig).split())
    words = re.sub(r"\(Background on this error at: [^)]*\)", "", words).strip()
    lower = words.lower()
    if "file is not a database" in lower or "malformed" in lower:
        return f"damaged ({words}); move it aside and import the run folders again with clusterbench store import"
    if "database or disk is full" in lower:
        return "the disk is full; nothing of this run was recorded"
    if "database is locked" in lower:
        return f"locked by another writer for more than {BUSY_TIMEOUT_S:g} s; nothing of this run was recorded"
    if "fatal:" in lower:  # psycopg: "connection to server at ... failed: FATAL:  password authentication ..."
        words = words[lower.index("fatal:") + 6:].strip()
    words = re.split(r" LINE \d+:", words)[0].strip()  # PostgreSQL's quote of the statement: not the reason
    return words[:300] or type(orig).__name__


class Store:
    def __init__(self, where: Where, engine: Engine) -> None:
        self.where, self.engine = where, engine

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except StoreError:
            raise
        except (SQLAlchemyError, OSError) as e:
            why = _why(e)
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
        return self.retrying(lambda: self._record(run))

    def _record(self, run: RunRecord) -> bool:
        try:
            with self.writing() as conn:
                if conn.execute(select(schema.runs.c.id).where(schema.runs.c.uid == run.uid)).first():
                    return False
                _insert(conn, run)
        except StoreError as e:
            if isinstance(e.__context__, IntegrityError):  # another importer of the same run won the race
                return False
            raise
        return True

    def close(self) -> None:
        self.engine.dispose()


def _insert(conn: Connection, run: RunRecord) -> None:
    when = started_s(run.started_utc)
    run_id = conn.execute(insert(schema.runs).values(
        uid=run.uid, command=run.command, started_utc=run.started_utc, started_s=when,
        finished_utc=run.finished_utc, status=run.status, verdict=run.verdict, host=run.host, folder=run.folder,
        reason=run.reason, recorded_s=time.time())).inserted_primary_key[0]
    # The nodes a run judged or knows the class of; the job's host list (node[01-16]) is none of them.
    classes = {**{f.node: f.klass for f in run.figures}, **run.node_classes}
    nodes = sorted({*run.node_verdicts, *run.node_classes})
    if nodes:
        conn.execute(insert(schema.nodes), [
            {"run_id": run_id, "node": n, "klass": classes.get(n, "?"), "verdict": run.node_verdicts.get(n)}
            for n in nodes])
    if run.figures:
        conn.execute(insert(schema.figures), [
            {"run_id": run_id, "started_s": when, "node": f.node, "device": f.device, "metric": f.metric,
             "value": f.value, "klass": f.klass} for f in run.figures])


def _engine(where: Where) -> Engine:
    if where.postgres:
        return create_engine(where.url, poolclass=NullPool, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
    engine = create_engine(where.url, poolclass=NullPool, connect_args={"timeout": BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _connect(dbapi: Any, record: Any) -> None:
        dbapi.isolation_level = None  # transactions begin where we say, and how (below)
        # Readers go on while a node's job writes. The mode stays with the file: switching takes the file
        # whole, so it is asked for only where the file is not in it yet.
        if dbapi.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            dbapi.execute("PRAGMA journal_mode=WAL")

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("clusterbench_write")
                             else "BEGIN")

    return engine


def open_store(where: Where, create: bool = True) -> Store:
    """The store at `where`, brought up to this version's schema. create=False: one that does not
    exist yet is an error (what history asks of an empty place)."""
    if where.path is not None and not where.path.exists():
        if not create:
            raise StoreError(f"store {where.shown}: nothing recorded there yet (no such file)")
        try:
            where.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"store {where.shown}: cannot create its folder ({e.strerror or e})") from None
    store = Store(where, _engine(where))
    try:
        store.retrying(lambda: _bring_up(store, create))
    except BaseException:
        store.close()
        raise
    return store


def _bring_up(store: Store, create: bool) -> None:
    """The store's schema checked, and migrated to this version where it is older."""
    where = store.where
    with store.reading() as conn:
        found = schema.version(conn)
    if found == 0 and not create:  # a database that never held a store: nothing to build for a reader
        raise StoreError(f"store {where.shown}: nothing recorded there yet (no clusterbench tables)")
    if found > schema.SCHEMA_VERSION:
        raise StoreError(_newer(where, found))
    if found < schema.SCHEMA_VERSION:
        with store.writing() as conn:
            found = schema.version(conn)  # another process may have built it meanwhile
            if found > schema.SCHEMA_VERSION:
                raise StoreError(_newer(where, found))
            schema.migrate(conn)


def _newer(where: Where, found: int) -> str:
    return (f"store {where.shown}: its schema is version {found}, newer than this clusterbench knows "
            f"({schema.SCHEMA_VERSION}); upgrade clusterbench to use it (a store is never downgraded)")
