"""The results store on a real PostgreSQL server (tests/pg_server.py), through the real CLI: a run recorded
there, importers racing into a new database, refused credentials, an unreachable server, a newer schema,
and a migration from version 1."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from beds import free_port
from conftest import assert_one_line_error, read_run, run_cli
from pg_server import PgServer, postgres_server

FAST = ["--iters", "3", "--warmup", "1", "--telemetry-hz", "0"]
BUSBW = "comm.all_reduce.busbw_gbps.top"
IMPORTED = re.compile(r"^# store (\S+): (\d+) recorded, (\d+) already there, (\d+) skipped$", re.MULTILINE)


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="module")
def comm_run(pg: PgServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path, str]:
    """A real two-rank `clusterbench comm` recorded in a database of its own: its ending, folder and store URL."""
    url = pg.create_database()
    out = tmp_path_factory.mktemp("pg") / "comm"
    proc = run_cli("comm", "--nproc", "2", "-e", "64K", *FAST, "--out", str(out), "--store", url)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    return proc, out, url


def shown(pg: PgServer, url: str) -> str:
    """How the store names a URL in what it prints: its password masked."""
    return url.replace(f":{pg.password}@", ":***@")


def database_of(url: str) -> str:
    return url.rsplit("/", 1)[1]


def imported(proc: subprocess.CompletedProcess) -> tuple[int, int, int]:
    """`store import`'s counts: recorded, already there, skipped."""
    found = IMPORTED.search(proc.stdout)
    assert found, (proc.returncode, proc.stdout, proc.stderr)
    return int(found.group(2)), int(found.group(3)), int(found.group(4))


def test_a_comm_run_is_recorded_in_postgres(pg: PgServer, comm_run) -> None:
    proc, out, url = comm_run
    assert f"# store: recorded in {shown(pg, url)}" in proc.stdout
    assert pg.password not in proc.stdout + proc.stderr
    run = read_run(out)
    host = run["env"]["hostname"]

    info = run_cli("store", "info", "--store", url)
    assert info.returncode == 0, info.stderr
    assert f"store:    {shown(pg, url)}" in info.stdout
    assert "schema:   version 2" in info.stdout
    assert "runs:     1 (" in info.stdout
    assert "nodes:    1" in info.stdout
    assert pg.password not in info.stdout + info.stderr

    history = run_cli("history", "--store", url, "--metric", BUSBW, "--node", host)
    assert history.returncode == 0, history.stderr
    rows = [line for line in history.stdout.splitlines() if BUSBW in line]
    assert len(rows) == 1, history.stdout
    assert rows[0].startswith(run["started_utc"]) and " comm " in rows[0], rows[0]
    (uid,) = pg.sql("SELECT uid FROM runs", database=database_of(url))[0]
    assert uid == run["uid"]

    # The run recorded as it ended is the one an import finds: never twice, however often imported.
    again = run_cli("store", "import", str(out), "--store", url)
    assert again.returncode == 0, again.stderr
    assert imported(again) == (0, 1, 0)
    fresh = pg.create_database()
    first, second = (run_cli("store", "import", str(out), "--store", fresh) for _ in range(2))
    assert (imported(first), imported(second)) == ((1, 0, 0), (0, 1, 0)), (first.stderr, second.stderr)
    assert pg.sql("SELECT count(*) FROM runs", database=database_of(fresh)) == [(1,)]


# Started by each racing importer: clusterbench's own CLI, its modules loaded beforehand, then held until the
# test lets all of them go at once; so they reach the new database together, migration included.
AT_ONCE = r"""
import os, sys
from pathlib import Path
from clusterbench import cli
import clusterbench.commands.store, clusterbench.publish.recording, clusterbench.results.folder, clusterbench.store.db
import psycopg, sqlalchemy.dialects.postgresql.psycopg, sqlalchemy.dialects.sqlite
Path(sys.argv[1]).touch()
sys.stdin.read(1)
sys.exit(cli.main(sys.argv[2:]))
"""
RACERS = 6


def _copies(folder: Path, into: Path, n: int) -> list[Path]:
    """`n` copies of a run folder, each a run of its own (its own uid)."""
    copies = []
    for i in range(n):
        copy = into / f"copy{i}"
        shutil.copytree(folder, copy)
        doc = json.loads((copy / "run.json").read_text())
        doc["uid"] = f"{doc['uid'][:24]}race{i:04d}"
        (copy / "run.json").write_text(json.dumps(doc))
        copies.append(copy)
    return copies


def _race(argvs: list[list[str]], ready: Path, timeout: float = 120) -> list[subprocess.CompletedProcess]:
    procs = [subprocess.Popen([sys.executable, "-c", AT_ONCE, str(ready / f"r{i}"), *argv], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, argv in enumerate(argvs)]
    try:
        deadline = time.monotonic() + timeout
        while len(list(ready.iterdir())) < len(procs):
            assert time.monotonic() < deadline, "the importers never got ready"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
            time.sleep(0.02)
        for p in procs:  # go (communicate closes stdin afterwards)
            p.stdin.write("g")
            p.stdin.flush()
        done = []
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
        return done
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
def test_importers_racing_into_a_new_store(kind: str, pg: PgServer, comm_run, tmp_path: Path) -> None:
    """Six processes import at the same moment into a store nobody has built yet: one builds the schema, the
    others wait for it; every run is recorded once, and a run all of them import is recorded once too."""
    _, folder, _ = comm_run
    copies = _copies(folder, tmp_path, RACERS)
    url = pg.create_database() if kind == "postgresql" else str(tmp_path / "racing" / "results.db")
    ready = tmp_path / "ready"
    ready.mkdir()
    # Each importer brings its own run and the one they all share, in either order.
    argvs = [["store", "import", *([str(c), str(folder)] if i % 2 else [str(folder), str(c)]), "--store", url]
             for i, c in enumerate(copies)]
    done = _race(argvs, ready)
    for proc in done:
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        assert proc.stderr == "", proc.stderr
    counts = [imported(p) for p in done]
    assert sum(c[0] for c in counts) == RACERS + 1, counts  # every copy, and the shared run once
    assert sum(c[1] for c in counts) == RACERS - 1, counts  # the shared run, found there by the others
    uids = {json.loads((c / "run.json").read_text())["uid"] for c in copies} | {read_run(folder)["uid"]}
    if kind == "postgresql":
        rows = pg.sql("SELECT uid FROM runs", database=database_of(url))
        version = pg.sql("SELECT value FROM clusterbench_meta WHERE key = 'schema_version'",
                         database=database_of(url))
    else:
        import sqlite3

        with sqlite3.connect(url) as conn:
            rows = conn.execute("SELECT uid FROM runs").fetchall()
            version = conn.execute("SELECT value FROM clusterbench_meta WHERE key = 'schema_version'").fetchall()
    assert sorted(uid for (uid,) in rows) == sorted(uids)
    from clusterbench.store.schema import SCHEMA_VERSION

    assert version == [(str(SCHEMA_VERSION),)]
    info = run_cli("store", "info", "--store", url)
    assert info.returncode == 0, info.stderr
    assert f"runs:     {RACERS + 1} (" in info.stdout and f"schema:   version {SCHEMA_VERSION}" in info.stdout
    figures = re.search(r"^figures:  (\d+)$", info.stdout, re.MULTILINE)
    assert figures and int(figures.group(1)) % (RACERS + 1) == 0, info.stdout  # each run's figures, once


def test_wrong_credentials_are_one_line_without_the_password(pg: PgServer, tmp_path: Path) -> None:
    bad = pg.url(password="not-the-password")
    for argv in (["store", "info"], ["store", "import", str(tmp_path)]):  # a reader and a writer
        proc = run_cli(*argv, "--store", bad)
        err = assert_one_line_error(proc, 1, "password authentication failed", f"{pg.user}:***@127.0.0.1:{pg.port}")
        assert "not-the-password" not in err + proc.stdout and pg.password not in err + proc.stdout
    missing = run_cli("store", "info", "--store", pg.url("no_such_db"))
    assert_one_line_error(missing, 1, 'database "no_such_db" does not exist')


def test_a_run_outlives_a_store_that_refuses_it(pg: PgServer, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("info", "--out", str(out), "--store", pg.url(password="not-the-password"))
    assert proc.returncode == 0, proc.stderr
    assert read_run(out)["status"] == "complete"
    (line,) = proc.stderr.strip().splitlines()  # one line, about the store
    assert line.startswith(f"clusterbench: store postgresql://{pg.user}:***@127.0.0.1:{pg.port}/postgres: "), line
    assert "password authentication failed" in line and line.endswith("(the run's own results are kept)"), line
    assert "not-the-password" not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


def test_an_unreachable_server_is_one_line_quickly(pg: PgServer) -> None:
    nobody = free_port()  # nothing listens there
    started = time.monotonic()
    proc = run_cli("store", "info", "--store", pg.url(port=nobody))
    took = time.monotonic() - started
    err = assert_one_line_error(proc, 1, f"127.0.0.1:{nobody}")
    assert pg.password not in err
    assert took < 30, f"{took:.1f} s"  # refused at once, or given up after the 10 s connect timeout: no hang


def test_a_newer_schema_is_refused_and_left_as_it_is(pg: PgServer, comm_run) -> None:
    from clusterbench.store.schema import SCHEMA_VERSION

    _, folder, _ = comm_run
    url = pg.create_database()
    database = database_of(url)
    assert imported(run_cli("store", "import", str(folder), "--store", url)) == (1, 0, 0)
    newer = SCHEMA_VERSION + 1
    pg.sql("UPDATE clusterbench_meta SET value = %s WHERE key = 'schema_version'", (str(newer),), database)
    for argv in (["store", "info"], ["store", "import", str(folder)]):  # a reader, and a writer that would migrate
        proc = run_cli(*argv, "--store", url)
        assert_one_line_error(proc, 2, f"version {newer}", f"({SCHEMA_VERSION})", "never downgraded")
    assert pg.sql("SELECT value FROM clusterbench_meta WHERE key = 'schema_version'", database=database) \
        == [(str(newer),)]
    assert pg.sql("SELECT count(*) FROM runs", database=database) == [(1,)]


def test_a_version_1_store_is_migrated_with_its_runs(pg: PgServer) -> None:
    from sqlalchemy import create_engine, insert

    from clusterbench.store import schema
    from clusterbench.store.db import open_store
    from clusterbench.store.where import resolve

    url = pg.create_database()
    where = resolve(url)
    now = time.time()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now - 3600))
    engine = create_engine(where.url)
    try:
        with engine.begin() as conn:
            assert schema.migrate(conn, target=1) == 0
            run_id = conn.execute(insert(schema.runs).values(
                uid="v1run", command="comm", started_utc=stamp, started_s=now - 3600, finished_utc=stamp,
                status="complete", verdict="PASS", host="n1", folder=None, reason=None,
                recorded_s=now)).inserted_primary_key[0]
            conn.execute(insert(schema.figures), [
                {"run_id": run_id, "started_s": now - 3600, "node": node, "device": "", "metric": metric,
                 "value": value, "klass": "cpu-x"}
                for node, metric, value in [("n1", BUSBW, 7.5), ("n1", "comm.all_reduce.algbw_gbps.top", 7.0),
                                            ("n2", BUSBW, 7.25)]])
    finally:
        engine.dispose()
    assert pg.sql("SELECT value FROM clusterbench_meta", database=database_of(url)) == [("1",)]

    store = open_store(where)
    try:
        with store.reading() as conn:
            assert schema.version(conn) == 2
            nodes = conn.execute(schema.nodes.select().order_by(schema.nodes.c.node)).all()
    finally:
        store.close()
    assert [tuple(row) for row in nodes] == [(run_id, "n1", "cpu-x", "PASS"), (run_id, "n2", "cpu-x", "PASS")]

    info = run_cli("store", "info", "--store", url)
    assert info.returncode == 0, info.stderr
    assert "schema:   version 2" in info.stdout and "nodes:    2" in info.stdout and "runs:     1 (" in info.stdout
    history = run_cli("history", "--store", url, "--metric", BUSBW, "--node", "n2")
    assert history.returncode == 0, history.stderr
    (row,) = [line for line in history.stdout.splitlines() if BUSBW in line]
    assert row.startswith(stamp) and row.split()[-1] == "PASS" and "7.25" in row, row


def test_a_reader_never_builds_migrates_or_writes(pg: PgServer, tmp_path: Path) -> None:
    """history and store info on a database that holds no store, or an older one, say so and leave it as it
    was; every transaction a reader opens is read-only, so PostgreSQL itself refuses a write."""
    from sqlalchemy import create_engine, text

    from clusterbench.store import schema
    from clusterbench.store.db import StoreError, open_store
    from clusterbench.store.where import resolve

    empty = pg.create_database()
    for argv in (["history"], ["history", "--runs"], ["store", "info"],
                 ["baseline", "--from-store", "-o", str(tmp_path / "b.json")]):
        assert_one_line_error(run_cli(*argv, "--store", empty), 2, "nothing recorded there yet")
    assert pg.sql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", database=database_of(empty)) == [(0,)]
    assert not (tmp_path / "b.json").exists()

    older = pg.create_database()
    engine = create_engine(resolve(older).url)
    try:
        with engine.begin() as conn:
            schema.migrate(conn, target=1)
    finally:
        engine.dispose()
    assert_one_line_error(run_cli("history", "--store", older), 2, "version 1, older", "store upgrade")
    assert pg.sql("SELECT value FROM clusterbench_meta", database=database_of(older)) == [("1",)]
    assert pg.sql("SELECT count(*) FROM pg_tables WHERE tablename = 'nodes'", database=database_of(older)) == [(0,)]

    upgraded = run_cli("store", "upgrade", "--store", older)
    assert upgraded.returncode == 0 and "schema version 2" in upgraded.stdout, upgraded.stderr
    store = open_store(resolve(older), write=False)
    try:
        with store.reading() as conn:
            assert conn.exec_driver_sql("SHOW transaction_read_only").scalar() == "on"
        with pytest.raises(StoreError, match="read-only transaction"), store.reading() as conn:
            conn.execute(text("DELETE FROM clusterbench_meta"))
    finally:
        store.close()
    assert pg.sql("SELECT value FROM clusterbench_meta", database=database_of(older)) == [("2",)]


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_figure_that_is_not_finite_is_damage_named_in_one_line(value: str, pg: PgServer, comm_run,
                                                                 tmp_path: Path) -> None:
    """PostgreSQL keeps NaN and infinities in a double column; no clusterbench records one, and every reader
    that meets one says where, instead of averaging it into the fleet or writing a null into a baseline."""
    _, folder, _ = comm_run
    url = pg.create_database()
    assert imported(run_cli("store", "import", str(folder), "--store", url)) == (1, 0, 0)
    pg.sql(f"UPDATE figures SET value = '{value}'::float8 WHERE metric = %s", (BUSBW,), database_of(url))
    host = read_run(folder)["env"]["hostname"]
    for argv in (["history", "--metric", BUSBW], ["history", "--node", host, "--metric", BUSBW],
                 ["baseline", "--from-store", "-o", str(tmp_path / "b.json")]):
        assert_one_line_error(run_cli(*argv, "--store", url), 2, "damaged: figures.value holds")
    assert not (tmp_path / "b.json").exists()


def test_a_dropped_table_or_a_name_no_reader_prints_is_damage_named_in_one_line(pg: PgServer, comm_run,
                                                                               tmp_path: Path) -> None:
    """A table or a column dropped by hand, or text no reader prints, is damage named in one line (exit 2) to
    readers and writers alike; and the URL forms libpq takes past a bare host: a local server's socket folder."""
    _, folder, _ = comm_run
    baseline = ["baseline", "--from-store", "-o", str(tmp_path / "b.json")]
    for script, says, readers in (
            ("DROP TABLE nodes", "damaged: its table nodes is missing", (["history", "--metric", BUSBW], baseline)),
            ("ALTER TABLE runs DROP COLUMN folder", "damaged: its column runs.folder is missing", (baseline,)),
            ("UPDATE runs SET command = 'comm' || chr(9)", "damaged: runs.command holds", (["history", "--runs"],))):
        url = pg.create_database()
        assert imported(run_cli("store", "import", str(folder), "--store", url)) == (1, 0, 0)
        pg.sql(script, database=database_of(url))
        for argv in readers:
            assert_one_line_error(run_cli(*argv, "--store", url), 2, says)
    socket = run_cli("store", "info", "--store", f"postgres://u:{pg.password}@/cb?host={tmp_path}")
    assert_one_line_error(socket, 1, "socket")
    assert pg.password not in socket.stderr and not (tmp_path / "b.json").exists()
