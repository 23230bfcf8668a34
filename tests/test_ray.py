"""--launcher ray end to end on a real Ray: the CLI starts a private local one (or joins one the test
starts), runs one actor per rank, and ends as the local launcher does: one exit code, one line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import assert_one_line_error, read_run, run_cli

pytest.importorskip("ray", reason="--launcher ray needs the ray package (pip install ray)")

SMALL = ("-b", "8", "-e", "64K", "--iters", "3")


@pytest.fixture
def ray_env() -> Iterator[dict[str, str]]:
    """A private Ray temp folder, so parallel tests never share a cluster. Short, under /tmp: Ray puts
    Unix sockets in it, and a socket path may not pass 107 characters."""
    tmp = tempfile.mkdtemp(prefix="cbray")
    yield {"RAY_TMPDIR": tmp, "RAY_ADDRESS": ""}
    shutil.rmtree(tmp, ignore_errors=True)


def test_ranks_run_as_ray_actors(ray_env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("comm", "--launcher", "ray", "--nproc", "2", *SMALL, "--out", str(out), env=ray_env)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "clusterbench:" not in proc.stderr, proc.stderr
    doc = json.loads((out / "run.json").read_text())
    assert doc["status"] == "complete"
    assert doc["env"]["world_size"] == 2
    assert [(r["rank"], r["local_rank"]) for r in doc["env"]["ranks"]] == [(0, 0), (1, 1)]
    assert all(r["node"] for r in doc["env"]["ranks"])
    assert doc["comm"] and all(row["wrong"] == 0 for row in doc["comm"])
    # Rank 0's table reaches the driver's stdout whole, the last line included, without Ray's prefixes.
    assert "Size (Bytes)" in proc.stdout and "# all_reduce: Avg bus bandwidth" in proc.stdout
    assert "pid=" not in proc.stdout


def test_a_rank_that_dies_under_ray_is_named(ray_env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "run"
    # A dead peer's closed connection ends the others at once; the timeout only bounds start-up here, which
    # took over 30 s on a loaded two-core CI machine.
    proc = run_cli("comm", "--launcher", "ray", "--nproc", "2", *SMALL, "--timeout", "90", "--out", str(out),
                   env={**ray_env, "CLUSTERBENCH_TEST_FAULT": "kill:1:3"}, timeout=180)
    assert_one_line_error(proc, 1, "rank 1 died", "all_reduce")
    assert "worker died" not in proc.stdout  # Ray's own paragraph about it is not repeated
    doc = read_run(out)
    assert doc["status"] == "failed" and "rank 1 died" in doc["error"]
    assert len(doc["comm"]) == 2  # the two sizes measured before the fault


def test_more_ranks_than_a_local_ray_holds(ray_env: dict[str, str], tmp_path: Path) -> None:
    # Usage (2), not a failed run: nothing was measured, and the user asked for what this Ray lacks.
    # A Ray started here never grows, so the answer comes at once, not after --timeout.
    start = time.monotonic()
    proc = run_cli("comm", "--launcher", "ray", "--nproc", "64", "--timeout", "90", "--out", str(tmp_path / "run"),
                   env=ray_env, timeout=180)
    assert_one_line_error(proc, 2, "64 ranks", "64 bundles of 1 CPU", "the cluster has")
    assert time.monotonic() - start < 90


@pytest.fixture
def joined_ray(ray_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """A one-CPU cluster started as `ray start` would be on a head node, for the CLI to join."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, **ray_env, "RAY_AUTH_MODE": "disabled"}  # no token to hand around in a test
    ray = str(Path(sys.executable).with_name("ray"))
    head = subprocess.Popen([ray, "start", "--head", "--port", str(port), "--num-cpus", "1", "--num-gpus", "0",
                             "--include-dashboard=false", "--disable-usage-stats"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = head.communicate(timeout=120)
        assert head.returncode == 0, err
        yield {**ray_env, "RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": f"127.0.0.1:{port}"}
    finally:
        # Not `ray stop`: that stops every Ray of this user on the machine. The head's processes stay in
        # the process group `ray start` led; its workers end with the raylet.
        try:
            os.killpg(head.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_joins_a_running_cluster(joined_ray: dict[str, str], tmp_path: Path) -> None:
    # The environment reaches the ranks of a cluster started elsewhere (here: the corruption switch),
    # and rank 0's lines all arrive although a joined driver disconnects at once.
    proc = run_cli("comm", "--launcher", "ray", "--nproc", "1", "-b", "8", "-e", "64", "--iters", "1",
                   "--timeout", "90", "--out", str(tmp_path / "one"), env={**joined_ray, "CLUSTERBENCH_TEST_CORRUPT":
                                                                          "all_reduce:0"}, timeout=180)
    assert_one_line_error(proc, 1, "4 wrong elements")
    assert "# all_reduce: Avg bus bandwidth" in proc.stdout
    # A joined cluster may grow, so placement waits --timeout before it gives up.
    start = time.monotonic()
    proc = run_cli("comm", "--launcher", "ray", "--nproc", "2", "--timeout", "3", "--out", str(tmp_path / "two"),
                   env=joined_ray, timeout=120)
    assert_one_line_error(proc, 2, "2 bundles of 1 CPU", "within 3 s", "the cluster has 1 CPU")
    assert 3 <= time.monotonic() - start < 60
