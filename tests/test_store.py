"""The results store on SQLite, through the real CLI: a run is recorded as it ends, imported once
however often it is imported, and a store that cannot take it (damaged, newer, full, unknown) costs
one line on stderr, never the run. PostgreSQL: test_store_postgres.py."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import assert_one_line_error, read_run, run_cli

from clusterbench.store import schema


@pytest.fixture(scope="module")
def comm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real two-rank sweep, recorded in a store of its own (and in a textfile), shared by the module."""
    folder = tmp_path_factory.mktemp("store")
    proc = run_cli("comm", "--nproc", "2", "-e", "64K", "--iters", "3", "--out", str(folder / "run"),
                   "--store", str(folder / "first.db"), "--metrics-textfile", str(folder / "comm.prom"))
    assert proc.returncode == 0, proc.stderr
    assert f"# store: recorded in {folder / 'first.db'}" in proc.stdout
    return folder / "run"


def copy_of(run: Path, where: Path) -> Path:
    """The same run folder under a new run's identity, as another node's run would be."""
    shutil.copytree(run, where)
    doc = json.loads((where / "run.json").read_text())
    doc["uid"] = uuid.uuid4().hex
    (where / "run.json").write_text(json.dumps(doc))
    return where


def counts(db: Path) -> tuple[int, int, int]:
    with sqlite3.connect(db) as conn:
        return tuple(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("runs", "nodes", "figures"))


def test_a_run_is_recorded_with_its_figures_as_it_ends(comm_run: Path) -> None:
    db = comm_run.parent / "first.db"
    run = read_run(comm_run)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT uid, command, status FROM runs").fetchall() == [(run["uid"], "comm", "complete")]
        busbw = conn.execute("SELECT node, value FROM figures WHERE metric = "
                             "'comm.all_reduce.busbw_gbps.top'").fetchall()
        version = conn.execute("SELECT value FROM clusterbench_meta WHERE key = 'schema_version'").fetchone()[0]
    assert busbw and busbw[0][0] == run["env"]["hostname"] and busbw[0][1] > 0
    assert int(version) == schema.SCHEMA_VERSION


def test_import_records_a_run_once_however_often(comm_run: Path, tmp_path: Path) -> None:
    db = tmp_path / "backfill.db"
    first = run_cli("store", "import", str(comm_run), str(comm_run / "run.json"), "--store", str(db))
    assert first.returncode == 0, first.stderr
    assert "1 recorded, 1 already there, 0 skipped" in first.stdout
    again = run_cli("store", "import", str(comm_run), "--store", str(db))
    assert "0 recorded, 1 already there" in again.stdout and again.returncode == 0
    assert counts(db)[0] == 1
    info = run_cli("store", "info", "--store", str(db))
    assert f"schema:   version {schema.SCHEMA_VERSION}" in info.stdout and "runs:     1" in info.stdout


def test_import_skips_what_it_cannot_read_and_says_so(comm_run: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "run.json").write_text("{ not json")
    proc = run_cli("store", "import", str(comm_run), str(broken), "--store", str(tmp_path / "s.db"))
    assert proc.returncode == 1
    assert "1 recorded, 0 already there, 1 skipped" in proc.stdout
    assert proc.stderr.startswith("# skipped") and len(proc.stderr.splitlines()) == 1 and str(broken) in proc.stderr


def test_by_default_a_run_is_recorded_in_the_users_data_directory(tmp_path: Path) -> None:
    proc = run_cli("info", "--out", str(tmp_path / "info"), env={"CLUSTERBENCH_STORE": "", "HOME": str(tmp_path),
                                                                 "XDG_DATA_HOME": str(tmp_path / "data")})
    db = tmp_path / "data" / "clusterbench" / "results.db"
    assert proc.returncode == 0 and f"# store: recorded in {db}" in proc.stdout, proc.stderr
    assert counts(db)[0] == 1


def test_off_records_nothing_and_an_unknown_store_is_refused_before_the_run(tmp_path: Path) -> None:
    proc = run_cli("comm", "--nproc", "2", "-e", "4K", "--out", str(tmp_path / "r"), "--store", "mysql://db/x")
    assert_one_line_error(proc, 2, "unknown kind of store 'mysql'")
    assert not (tmp_path / "r").exists()
    proc = run_cli("store", "info", "--store", "off")
    assert_one_line_error(proc, 2, "--store off")


def test_a_damaged_store_costs_one_line_never_the_run(tmp_path: Path) -> None:
    db = tmp_path / "damaged.db"
    db.write_bytes(b"this is not SQLite at all\n" * 200)
    before = db.read_bytes()
    proc = run_cli("info", "--out", str(tmp_path / "r"), "--store", str(db))
    assert proc.returncode == 0, proc.stderr
    assert read_run(tmp_path / "r")["status"] == "complete"
    err = [line for line in proc.stderr.splitlines() if "store" in line]
    assert len(err) == 1 and "damaged" in err[0] and "the run's own results are kept" in err[0], proc.stderr
    assert db.read_bytes() == before
    assert_one_line_error(run_cli("store", "info", "--store", str(db)), 2, "damaged")  # the store named is bad input
    assert db.read_bytes() == before


def test_a_store_of_a_newer_schema_is_refused_never_downgraded(comm_run: Path, tmp_path: Path) -> None:
    db = tmp_path / "newer.db"
    shutil.copy(comm_run.parent / "first.db", db)
    newer = schema.SCHEMA_VERSION + 1
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE clusterbench_meta SET value = ? WHERE key = 'schema_version'", (str(newer),))
    err = assert_one_line_error(run_cli("store", "import", str(copy_of(comm_run, tmp_path / "r")), "--store", str(db)),
                                2, f"version {newer}", f"({schema.SCHEMA_VERSION})", "upgrade clusterbench")
    assert "Traceback" not in err
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM clusterbench_meta").fetchone()[0] == str(newer)
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1


def test_history_of_a_store_that_does_not_exist_says_so(tmp_path: Path) -> None:
    assert_one_line_error(run_cli("history", "--store", str(tmp_path / "none.db")), 2, "nothing recorded there yet")
    assert not (tmp_path / "none.db").exists()


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1) for a mount namespace")
def test_a_disk_that_fills_mid_write_records_nothing_half(comm_run: Path, tmp_path: Path) -> None:
    """A real full disk: a 1 MiB tmpfs in a mount namespace of this test's own, filled before the second import."""
    if subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot make a mount namespace here (needs root)")
    mnt = tmp_path / "small"
    mnt.mkdir()
    second = copy_of(comm_run, tmp_path / "second")
    cb = f"{sys.executable} -m clusterbench"
    script = f"""
set -u
mount -t tmpfs -o size=1m tmpfs {mnt}
{cb} store import {comm_run} --store {mnt}/s.db >/dev/null || exit 10
dd if=/dev/zero of={mnt}/filler bs=4k status=none 2>/dev/null
{cb} store import {second} --store {mnt}/s.db > {tmp_path}/out 2> {tmp_path}/err
echo $? > {tmp_path}/rc
rm {mnt}/filler
{cb} store info --store {mnt}/s.db > {tmp_path}/info
"""
    done = subprocess.run(["unshare", "-m", "bash", "-c", script], capture_output=True, text=True, timeout=180,
                          check=False)
    assert done.returncode == 0, done.stderr
    err = (tmp_path / "err").read_text().strip()
    assert (tmp_path / "rc").read_text().strip() == "1" and len(err.splitlines()) == 1, err
    assert "disk is full" in err and "Traceback" not in err
    assert "runs:     1 " in (tmp_path / "info").read_text()  # the first run, whole; nothing of the second


def test_the_textfile_is_prometheus_text_with_every_figure(comm_run: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    run = read_run(comm_run)
    families = {f.name: f for f in text_string_to_metric_families((comm_run.parent / "comm.prom").read_text())}
    figures = {s.labels["metric"]: s for s in families["clusterbench_figure"].samples}
    top = figures["comm.all_reduce.busbw_gbps.top"]
    assert top.labels["node"] == run["env"]["hostname"] and top.labels["command"] == "comm"
    assert top.labels["hardware_class"].endswith("cores)") and top.labels["device"] == ""
    with sqlite3.connect(comm_run.parent / "first.db") as conn:
        stored = dict(conn.execute("SELECT metric, value FROM figures").fetchall())
    assert {name: s.value for name, s in figures.items()} == pytest.approx(stored)
    assert families["clusterbench_run_started_seconds"].samples[0].value > 1.7e9
    assert not list((comm_run.parent).glob("*.prom.*"))  # written whole, through a temporary it renamed


def test_figures_go_to_a_pushgateway_and_a_bad_one_costs_one_line(comm_run: Path) -> None:
    """A real HTTP server standing in for the Pushgateway: what it receives is parsed as Prometheus parses it."""
    import http.server
    import threading

    from prometheus_client.parser import text_string_to_metric_families

    from clusterbench import publish
    from clusterbench.publish.recording import record_of
    from clusterbench.stages.registry import load_run

    got: list[tuple[str, str]] = []

    class Gateway(http.server.BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            got.append((self.path, self.rfile.read(int(self.headers["Content-Length"])).decode()))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Gateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        record = record_of(load_run(comm_run), str(comm_run))
        url = f"http://127.0.0.1:{server.server_port}"
        assert publish.publish(record, publish.Outputs(pushgateway=url), None)
    finally:
        server.shutdown()
        server.server_close()  # now nobody listens there
    (path, body), = got
    assert path == f"/metrics/job/clusterbench/instance/{record.host}"
    names = {f.name for f in text_string_to_metric_families(body)}
    assert {"clusterbench_figure", "clusterbench_run_started_seconds"} <= names
    bad = run_cli("info", "--store", "off", "--out", str(comm_run.parent / "pushed"), "--pushgateway",
                  f"http://127.0.0.1:{server.server_port}")
    assert bad.returncode == 0 and len(bad.stderr.strip().splitlines()) == 1 and "--pushgateway" in bad.stderr


def test_a_textfile_node_exporter_would_not_read_is_refused(tmp_path: Path) -> None:
    assert_one_line_error(run_cli("info", "--out", str(tmp_path / "i"), "--metrics-textfile", str(tmp_path / "x.txt")),
                          2, "only *.prom files")
