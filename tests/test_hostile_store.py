"""The results store against hostile input: damaged, foreign, empty and older stores, store URLs a user
would type, questions with nothing to judge; then a list of runs, and an import of hundreds of folders.

The promise (README, "Errors and exit codes"): one line on stderr and exit 2 (1: judged, and found), never
a traceback, an internal error or a hang; a command that only reads a store leaves its file as it was, to
the byte and the mtime; a secret in a URL is never shown. The stores are real SQLite files, built through
the store's own API as runs record themselves, then damaged with sqlite3 as a careless hand or another
program would. Each store is kept in the rollback journal, so a reader that switched it to the
write-ahead log would change its bytes. PostgreSQL's side: test_store_postgres.py.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from conftest import assert_one_line_error, run_cli, run_side_by_side
from report_fixtures import gpu_run_doc, write_run

from clusterbench.analyse.baseline import bands_of, load_means
from clusterbench.errors import UsageError
from clusterbench.stages.registry import load_run
from clusterbench.store.db import open_store
from clusterbench.store.record import Figure, RunRecord
from clusterbench.store.where import sqlite

KLASS = "H200 x8"
NODES = [f"gpu-{i:02d}" for i in range(1, 6)]
DAY = 86400
MATMUL = "node.matmul_tflops"
SECRET = "hunter2-not-shown"
PARALLEL = 8
# The figure every question about gpu-03 reads: its latest matmul.
LATEST = f"(SELECT max(rowid) FROM figures WHERE node = 'gpu-03' AND metric = '{MATMUL}')"


def stamp(seconds: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(seconds))


def build_store(db: Path, nodes: list[str] = NODES, days: int = 8) -> Path:
    """`days` daily fleet runs of `nodes`; gpu-03's matmul falls by 40 % in the last. Left in the rollback
    journal (writers switch a store to the write-ahead log), so that a reader switching it would show."""
    store = open_store(sqlite(db))
    start = time.time() - days * DAY
    for day in range(days):
        figures = []
        for i, node in enumerate(nodes):
            matmul = 420.0 if node == "gpu-03" and day == days - 1 else 700.0 + i + day % 2
            figures += [Figure(node, "", MATMUL, matmul, KLASS), Figure(node, "", "node.latency_us", 20.0 + i, KLASS)]
        store.record(RunRecord(f"run{day}", "fleet", stamp(start + day * DAY), None, "complete", "PASS", nodes[0],
                               f"/runs/{day}", figures, dict.fromkeys(nodes, "PASS")))
    store.close()
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
    return db


def damaged(good: Path, name: str, *scripts: str) -> Path:
    """A copy of `good` with each script run on it, in a connection of its own (a schema edit takes effect
    in the next)."""
    db = good.parent / f"{name}.db"
    shutil.copy(good, db)
    for script in scripts:
        conn = sqlite3.connect(db)
        conn.executescript(script)
        conn.close()
    return db


# A column that may not be NULL made one that may: what another program's copy of the table could be.
NULLABLE_VALUE = ("PRAGMA writable_schema = ON; UPDATE sqlite_master SET sql = replace(sql, 'value FLOAT NOT NULL', "
                  "'value FLOAT') WHERE name = 'figures';")
# Damage to the figures (table.column the line names, the scripts), read by every question about figures.
FIGURE_DAMAGE = {
    "value text": ("figures.value", f"UPDATE figures SET value = 'abc' WHERE rowid = {LATEST};"),
    "value NULL": ("figures.value", NULLABLE_VALUE, f"UPDATE figures SET value = NULL WHERE rowid = {LATEST};"),
    "value inf": ("figures.value", f"UPDATE figures SET value = 9e999 WHERE rowid = {LATEST};"),
    "started_s text": ("figures.started_s", f"UPDATE figures SET started_s = 'yesterday' WHERE rowid = {LATEST};"),
    "value -inf": ("figures.value", f"UPDATE figures SET value = -9e999 WHERE rowid = {LATEST};"),
    "value blob": ("figures.value", f"UPDATE figures SET value = X'00ff' WHERE rowid = {LATEST};"),
    # Read by every question but one of gpu-03 alone, which never meets it: placed where its readers are others.
    "node blob": ("figures.node", f"UPDATE figures SET node = X'ff' WHERE rowid = {LATEST};"),
}
# Text no reader prints (a tab, a bell, a non-breaking space) or longer than its column, each to a reader that
# reads that column: (reader, table.column, script).
TEXT_DAMAGE = {
    "a tab in a node": (["history", "--metric", MATMUL], "figures.node",
                        f"UPDATE figures SET node = 'gpu' || char(9) || '03' WHERE rowid = {LATEST};"),
    "a bell in a folder": (["history", "--runs"], "runs.folder",
                           "UPDATE runs SET folder = '/runs/' || char(7) WHERE uid = 'run7';"),
    "a non-breaking space in a class": (["store", "info"], "nodes.klass",
                                        "UPDATE nodes SET klass = 'H200' || char(160) || 'x8' WHERE node = 'gpu-03';"),
    "a command past its column": (["history", "--runs"], "runs.command",
                                  "UPDATE runs SET command = replace(hex(zeroblob(20)), '0', 'x') WHERE uid = 'run7';"),
}
# A table or column gone (a careless hand, another program's migration): (reader, what the line names, script).
DROPPED = {
    "figures": (["history", "--metric", MATMUL], "table figures", "DROP TABLE figures;"),
    "nodes": (["history", "--runs"], "table nodes", "DROP TABLE nodes;"),
    "runs": (["store", "info"], "table runs", "DROP TABLE runs;"),
    "clusterbench_meta": (["history"], "table clusterbench_meta", "DROP TABLE clusterbench_meta;"),
    "a column": (["history", "--regressions"], "column runs.folder", "ALTER TABLE runs DROP COLUMN folder;"),
}
VERSION_DAMAGE = {
    "version text": "UPDATE clusterbench_meta SET value = 'abc';",
    "version negative": "UPDATE clusterbench_meta SET value = '-1';",
    "version zero": "UPDATE clusterbench_meta SET value = '0';",
    "version huge": f"UPDATE clusterbench_meta SET value = '{'9' * 5000}';",
    "version a float": "UPDATE clusterbench_meta SET value = 2.5;",
    "version row gone": "DELETE FROM clusterbench_meta;",
}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile-store")
    build_store(root / "good.db")
    build_store(root / "thin.db", days=2)  # too short a past to judge anyone by
    write_run(root / "run", gpu_run_doc({}))
    (root / "out").mkdir()  # where outputs would go: nothing may appear there
    return root


def _figure_reader(root: Path, i: int, name: str) -> list[str]:
    out = root / "out" / name.replace(" ", "-")
    return [["history", "--regressions"], ["history", "--metric", MATMUL],
            ["history", "--node", "gpu-03", "--metric", MATMUL], ["history", "--report", f"{out}.html"],
            ["baseline", "--from-store", "-o", f"{out}.json"]][i % 5]


def _store_cases(root: Path) -> dict[str, tuple[list[str], int, str]]:
    """name -> (argv, exit code, what the line must say): each damage read by readers in turn."""
    good = root / "good.db"
    cases = {}
    for i, (name, (column, *scripts)) in enumerate(FIGURE_DAMAGE.items()):
        db = damaged(good, name.replace(" ", "-"), *scripts)
        for j in (0, 2):  # two readers each, in turn: every reader meets several damages
            argv = _figure_reader(root, i + j, f"{name}-{j}")
            cases[f"{' '.join(argv[:2])}: {name}"] = ([*argv, "--store", str(db)], 2, f"damaged: {column} holds")
    stamps = damaged(good, "started-utc", "UPDATE runs SET started_utc = 'yesterday' WHERE uid = 'run7';")
    for argv in (["history"], ["history", "--runs"], ["store", "info"]):
        cases[f"{' '.join(argv)}: started_utc text"] = ([*argv, "--store", str(stamps)], 2, "runs.started_utc holds")
    # Text that would rewrite the terminal, or forge a line of the list: never printed.
    forged = damaged(good, "forged", "UPDATE runs SET command = char(27) || '[31mcheck', "
                     "verdict = 'PASS' || char(10) || '20260101T000000Z fleet 999 FAIL' WHERE uid = 'run7';")
    cases["history --runs: control characters"] = (["history", "--runs", "--store", str(forged)], 2,
                                                   "not printable text")
    for name, (argv, column, script) in TEXT_DAMAGE.items():
        db = damaged(good, name.replace(" ", "-"), script)
        cases[f"{' '.join(argv)}: {name}"] = ([*argv, "--store", str(db)], 2, f"damaged: {column} holds")
    for i, (name, (argv, what, script)) in enumerate(DROPPED.items()):
        db = damaged(good, f"dropped-{name.replace(' ', '-')}", script)
        cases[f"{' '.join(argv)}: {name} dropped"] = ([*argv, "--store", str(db)], 2, f"damaged: its {what} is missing")
        out = str(root / "out" / f"dropped-{i}.json")  # writers meet it before they write: a baseline, an import
        writer = ["baseline", "--from-store", "-o", out] if i % 2 else ["store", "import", str(root / "run")]
        cases[f"{writer[0]}: {name} dropped"] = ([*writer, "--store", str(db)], 2, f"damaged: its {what} is missing")
    readers = [["history"], ["store", "info"], ["history", "--runs"], ["baseline", "--from-store", "-o"],
               ["history", "--regressions"], ["history", "--metric", MATMUL]]
    for i, (name, script) in enumerate(VERSION_DAMAGE.items()):
        db = damaged(good, name.replace(" ", "-"), script)
        argv = readers[i % len(readers)] + ([str(root / "out" / "v.json")] if i % len(readers) == 3 else [])
        cases[f"{' '.join(argv[:2])}: {name}"] = ([*argv, "--store", str(db)], 2, "damaged: clusterbench_meta")
    newer = damaged(good, "newer", "UPDATE clusterbench_meta SET value = '3';")
    cases["history: a newer schema"] = (["history", "--store", str(newer)], 2, "upgrade clusterbench")
    older = _version_1(root / "older.db")
    for argv in (["history", "--runs"], ["store", "info"]):
        cases[f"{argv[-1]}: an older schema"] = ([*argv, "--store", str(older)], 2, "clusterbench store upgrade")
    return cases


def _version_1(db: Path) -> Path:
    """A store as clusterbench's first schema left it: no nodes table."""
    from sqlalchemy import create_engine

    from clusterbench.store import schema

    engine = create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        schema.migrate(conn, target=1)
    engine.dispose()
    return db


def _file_cases(root: Path) -> dict[str, tuple[list[str], int, str]]:
    """Files that are no store, to every kind of reader, and to a writer."""
    with sqlite3.connect(root / "foreign.db") as conn:
        conn.execute("CREATE TABLE accounts (id INTEGER, owner TEXT)")
        conn.execute("INSERT INTO accounts VALUES (1, 'someone')")
    (root / "empty.db").write_bytes(b"")
    (root / "noise.db").write_bytes(b"not SQLite at all\n" * 300)
    (root / "header-only.db").write_bytes(b"SQLite format 3\x00" + b"\x07" * 4000)
    (root / "a-folder.db").mkdir()
    files = {"foreign": "not a clusterbench results store", "empty": "an empty file",
             "noise": "not an SQLite database", "header-only": "damaged", "a-folder": "is a folder",
             "absent": "no such file"}
    readers = [["history"], ["history", "--regressions"], ["store", "info"],
               ["baseline", "--from-store", "-o", str(root / "out" / "f.json")], ["history", "--runs"]]
    cases = {}
    for i, (name, says) in enumerate(files.items()):
        argv = readers[i % 5]
        cases[f"{' '.join(argv[:2])}: {name}"] = ([*argv, "--store", str(root / f"{name}.db")], 2, says)
    for name in ("foreign", "noise"):  # a writer leaves someone else's file alone too
        cases[f"store import: {name}"] = (["store", "import", str(root / "run"), "--store", str(root / f"{name}.db")],
                                          2, files[name])
    return cases


def _url_cases(root: Path) -> dict[str, tuple[list[str], int, str]]:
    """Each URL to a command in turn: refused in one line before anything is read or measured (exit 2), or,
    where it is a URL libpq takes, tried (exit 1: nothing listens there), its password never shown."""
    urls = {
        "sqlite in memory": ("sqlite://", "in memory keeps nothing"),
        "sqlite with a host": ("sqlite://results.db", "write sqlite:///results.db"),
        "sqlite with options": ("sqlite:///x.db?mode=ro", "write sqlite:///x.db"),
        "port text": (f"postgresql://u:{SECRET}@db.example:abc/cb", "port 'abc' is not a port number"),
        "port too big": (f"postgresql://u:{SECRET}@db.example:70000/cb", "port '70000' is not a port number"),
        "ipv6 unclosed": ("postgresql://[::1/cb", "never closes it"),
        "ipv6 not hex": (f"postgresql://u:{SECRET}@[zz]:5432/cb", "[zz] is not an IPv6 address"),
        "ipv6 bare": ("postgresql://::1:5432/cb", "goes in brackets"),
        "password parameter": (f"postgresql://u@[::1/cb?password={SECRET}", "never closes it"),
        "name too long": (str(root / ("x" * 300 + ".db")), "too long for the file system"),
        "no such user": ("~no-such-user-here/results.db", "no user 'no-such-user-here'"),
        "a file for a folder": (str(root / "run" / "run.json" / "s.db"), "not a folder"),
        "unknown scheme": (f"mysql://a-rather-long-user-name:{SECRET}@h/db", "unknown kind of store"),
        "a slash in the password": (f"postgresql://u:{SECRET}/x@db.example/cb", "must be written %2F"),
        "sqlite with a password": (f"sqlite://u:{SECRET}@h/x.db", "names no user and no host"),
        "port in the query": (f"postgresql://u:{SECRET}@db.example/cb?port=x", "port 'x' is not a port number"),
        "sslmode of no such name": (f"postgresql://u:{SECRET}@db.example/cb?sslmode=bogus", "?sslmode='bogus' is none"),
        "a parameter libpq has not": ("postgresql://u@db.example/cb?colour=red", "no parameter of a PostgreSQL"),
        "a timeout of no number": ("postgresql://u@db.example/cb?connect_timeout=soon", "is not a whole number"),
        "credentials without a scheme": (f"alice:{SECRET}@db.example/cb", "a URL needs its scheme"),
        "a space in the password": (f"postgresql://alice:pa ss{SECRET}@db.example:99999/cb", "port '99999'"),
        "a local server's socket folder": (f"postgres://u:{SECRET}@/cb?host={root / 'no-server'}", "failed"),
    }
    commands = [["history"], ["store", "import", str(root / "run")], ["history", "--regressions"],
                ["baseline", "--from-store", "-o", str(root / "out" / "u.json")]]
    return {f"{commands[i % 4][0]}: {name}": ([*commands[i % 4], "--store", url], 1 if "socket" in name else 2, says)
            for i, (name, (url, says)) in enumerate(urls.items())}


def _judging_cases(root: Path) -> dict[str, tuple[list[str], int, str]]:
    good, thin = str(root / "good.db"), str(root / "thin.db")
    comm_only = root / "comm-only.yaml"  # rules of a job's figures: none is about a node's
    comm_only.write_text("rules:\n  - {metric: comm.*, function: change, criteria: '>= -0.1', missing: WARN}\n")
    # A rule that matches no figure, beside one that judges matmul: it used to be formatted as if it had judged.
    beside = root / "beside.yaml"
    beside.write_text("rules:\n  - {metric: nothing.*, function: change, criteria: '>= -0.1', missing: FAIL}\n"
                      f"  - {{metric: {MATMUL}, function: change, criteria: '>= -0.1'}}\n")
    return {
        "regressions: a period of nothing": (["history", "--store", good, "--regressions", "--since", "1h"], 2,
                                             "nothing to judge: no figures of"),
        "regressions: an unknown class": (["history", "--store", good, "--regressions", "--class", "A100 x8"], 2,
                                          "the store knows 'H200 x8'"),
        "regressions: a past too short": (["history", "--store", thin, "--regressions"], 2,
                                          "nothing to judge: no node has 4 figures"),
        "regressions: rules about nothing here": (["history", "--store", good, "--regressions", "--rules",
                                                   str(comm_only)], 2, "nothing to judge: no rule of --rules"),
        "regressions: a rule that judges nothing beside one that does": (
            ["history", "--store", good, "--regressions", "--rules", str(beside)], 1, ""),
        "regressions: a window too short": (["history", "--store", good, "--regressions", "--window", "2"], 2,
                                            "needs at least 3"),
        "by date: a period of nothing": (["history", "--store", good, "--metric", MATMUL, "--since", "1h"], 2,
                                         "no figures"),
        "report: a period of nothing": (["history", "--store", good, "--report", str(root / "out" / "t.html"),
                                         "--since", "1h"], 2, "nothing to draw"),
        "runs: an unknown node": (["history", "--store", good, "--runs", "--node", "gpu-99"], 2, "no such node"),
        "runs: with a metric": (["history", "--store", good, "--runs", "--metric", MATMUL], 2, "--runs lists"),
    }


def _state(root: Path) -> dict[str, tuple[str, int]]:
    """Every file the user had, by its bytes and its mtime."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_hostile_stores_urls_and_questions(home: Path) -> None:
    cases = {**_store_cases(home), **_file_cases(home), **_url_cases(home), **_judging_cases(home)}
    before = _state(home)
    done = run_side_by_side({name: argv for name, (argv, _, _) in cases.items()}, cwd=home, timeout=60,
                            at_once=PARALLEL)
    failures = []
    for name, (_, code, says) in cases.items():
        proc = done[name]
        if proc is None:
            failures.append(f"{name}: hung")
            continue
        err = proc.stderr.strip()
        if proc.returncode != code:
            failures.append(f"{name}: exit {proc.returncode}, not {code}: {err[-300:]}")
        elif (code == 2 or says) and (len(err.splitlines()) != 1 or says not in err):
            failures.append(f"{name}: stderr was not one line saying {says!r}: {err[-300:]}")
        elif any(bad in proc.stdout + proc.stderr for bad in ("Traceback", "internal error", SECRET)):
            failures.append(f"{name}: {err[-300:]}")
    assert not failures, "\n".join(failures)
    assert _state(home) == before, "a command that only reads a store changed a file"
    assert not list((home / "out").iterdir()), "an output was written from a store that was refused"


def test_an_older_store_is_upgraded_only_when_asked(home: Path, tmp_path: Path) -> None:
    db = shutil.copy(_version_1(tmp_path / "v1.db"), tmp_path / "older.db")
    bytes_before = Path(db).read_bytes()
    assert_one_line_error(run_cli("history", "--store", str(db)), 2, "version 1, older", "store upgrade")
    assert Path(db).read_bytes() == bytes_before
    upgraded = run_cli("store", "upgrade", "--store", str(db))
    assert upgraded.returncode == 0 and "schema version 2" in upgraded.stdout, upgraded.stderr
    assert run_cli("history", "--store", str(db)).returncode == 0
    assert_one_line_error(run_cli("store", "upgrade", "--store", str(tmp_path / "none.db")), 2, "no such file")
    assert not (tmp_path / "none.db").exists()


def test_sqlalchemys_urls_name_the_same_file(home: Path) -> None:
    """sqlite:///RELATIVE and sqlite:////ABSOLUTE, as SQLAlchemy reads them, are the file path itself."""
    forms = {"relative": "sqlite:///good.db", "absolute": f"sqlite:///{home / 'good.db'}",
             "with its driver": "SQLite+pysqlite:///good.db"}
    done = run_side_by_side({name: ["history", "--store", url] for name, url in forms.items()}, cwd=home)
    for name, proc in done.items():
        assert proc.returncode == 0 and f"# store {home / 'good.db'}: 8 runs" in proc.stdout, (name, proc.stderr)


def test_the_runs_latest_first(home: Path, tmp_path: Path) -> None:
    good = str(home / "good.db")
    proc = run_cli("history", "--store", good, "--runs", "--last", "3")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line[:2] == "20"]
    assert [r[-2] for r in rows] == ["run7", "run6", "run5"]  # the uid, latest first
    assert all(r[1] == "fleet" and r[2] == "5" and r[3] == "PASS" for r in rows) and rows[0][-1] == "/runs/7"
    assert "started (UTC)" in proc.stdout and "uid" in proc.stdout
    by_node = run_cli("history", "--store", good, "--runs", "--node", "gpu-02", "--class", KLASS, "--since", "84h")
    assert by_node.returncode == 0 and len([r for r in by_node.stdout.splitlines() if r[:2] == "20"]) == 3, by_node
    quiet = run_cli("history", "--store", good, "--runs", "--since", "1h")  # a list judges nothing: empty is no error
    assert quiet.returncode == 0 and "no runs recorded since" in quiet.stdout and quiet.stderr == "", quiet


def test_a_baseline_of_bands_of_one_node_says_they_judge_nobody(tmp_path: Path) -> None:
    db = build_store(tmp_path / "one.db", nodes=["gpu-01"], days=4)
    out = tmp_path / "one.json"
    proc = run_cli("baseline", "--from-store", "--store", str(db), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "0 node bands (left out: matmul_tflops (1 node); a band judges from 3 nodes)" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["bands"] == [] and doc["metrics"][MATMUL]["count"] == 4
    # What it wrote, clusterbench reads: its means for compare, and its bands refused as bands, saying why.
    assert load_means(out) == {MATMUL: pytest.approx(700.5), "node.latency_us": 20.0}
    with pytest.raises(UsageError, match="holds no node bands"):
        bands_of(out, "--baseline", load_run)


IMPORTED = 300


def test_an_import_of_hundreds_of_folders(tmp_path: Path) -> None:
    """Hundreds of run folders in one call: a transaction per batch, a progress line per batch, the folders
    it cannot read named, and a second import that finds every run there."""
    doc = gpu_run_doc({})
    folders = []
    for i in range(IMPORTED):
        folders.append(str(write_run(tmp_path / "runs" / f"r{i:04d}", doc | {"uid": f"import{i:04d}"})))
    (tmp_path / "runs" / "broken").mkdir()
    (tmp_path / "runs" / "broken" / "run.json").write_text("{ cut off")
    folders.insert(IMPORTED // 2, str(tmp_path / "runs" / "broken"))
    db = tmp_path / "s.db"
    started = time.monotonic()
    first = run_cli("store", "import", *folders, "--store", str(db))
    took = time.monotonic() - started
    assert first.returncode == 1, first.stderr  # one folder skipped
    assert f"{IMPORTED} recorded, 0 already there, 1 skipped" in first.stdout
    progress = [line for line in first.stdout.splitlines() if " read: " in line]
    assert len(progress) == 2 and progress[0].endswith(": 200 recorded, 0 already there, 1 skipped"), first.stdout
    assert progress[-1].startswith(f"# {IMPORTED + 1}/{IMPORTED + 1} read: "), first.stdout
    assert first.stderr.count("# skipped") == 1 and "broken" in first.stderr
    again = run_cli("store", "import", *folders[:IMPORTED // 2], "--store", str(db))
    assert f"0 recorded, {IMPORTED // 2} already there, 0 skipped" in again.stdout, again.stdout
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT uid) FROM runs").fetchone() == (IMPORTED, IMPORTED)
    print(f"imported {IMPORTED} folders in {took:.1f} s")
