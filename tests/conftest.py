"""Shared helpers: run the real CLI in a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from clusterbench.stages.comm.records import PAIRS

# The runs the tests start are recorded nowhere, unless a test names a store (test_store*.py, test_history.py):
# never in the user's data directory, and without a second's SQLAlchemy import in each of hundreds of runs.
os.environ["CLUSTERBENCH_STORE"] = "off"

# The longest files first among files of as many tests (measured, 2026-12-03): xdist hands out files by their
# number of tests, ties in the order collected. The run that passed in 17m35s (BENCHMARKS.md) had this order.
LONGEST_FIRST = ("test_train.py", "test_fleet_netns.py", "test_run.py", "test_launchers.py", "test_fleet.py",
                 "test_netns.py", "test_hostile.py", "test_ray.py", "test_fleet_scale_netns.py",
                 "test_hostile_store.py", "test_check_slurm.py", "test_launch_failures.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order kept


# Not Llama-style, and naming its position limit n_positions.
GPT2 = {"model_type": "gpt2", "vocab_size": 4096, "n_embd": 64, "n_layer": 2, "n_head": 2, "n_positions": 32}


def run_cli(*args: str, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "clusterbench", *args],
        capture_output=True, text=True, env=full_env, timeout=timeout, check=False,
    )


def run_side_by_side(cases: dict[str, list[str]], cwd: Path | None = None, timeout: float = 120,
                     at_once: int = 8, envs: dict[str, dict[str, str]] | None = None,
                     ) -> dict[str, subprocess.CompletedProcess | None]:
    """`python -m clusterbench ARGS` for each case, `at_once` started together, so each pays the
    interpreter's and torch's start-up beside the others; None for a case that ran past `timeout` (killed).
    `envs`: a case's whole environment, where it is not this process's."""
    done: dict[str, subprocess.CompletedProcess | None] = {}
    names = list(cases)
    for start in range(0, len(names), at_once):
        procs = {name: subprocess.Popen([sys.executable, "-m", "clusterbench", *cases[name]], cwd=cwd, text=True,
                                        env=(envs or {}).get(name), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for name in names[start:start + at_once]}
        for name, proc in procs.items():
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                done[name] = None
                continue
            done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done


def assert_one_line_error(proc: subprocess.CompletedProcess, code: int = 2, *needles: str) -> str:
    err = proc.stderr.strip()
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    return err


def read_run(path: Path) -> dict:
    return json.loads((Path(path) / "run.json").read_text())


def read_pairs(path: Path) -> list[dict]:
    """A run folder's pair rows, from pairs.csv (run.json only counts them), as run.json's sections read."""
    from clusterbench.results import codec
    from clusterbench.stages.registry import load_run

    return [codec.dump(p) for p in PAIRS.of(load_run(path))]


@pytest.fixture
def cli():
    return run_cli


def start_nodes(nodes: int, args: list[str], per_node: int = 1, master: str = "127.0.0.1", port: int | None = None,
                env_of: Callable[[int], dict[str, str]] = lambda node: {},
                popen: Callable[..., subprocess.Popen] | None = None) -> list[subprocess.Popen]:
    """`clusterbench ARGS` as every rank of a job of `nodes` x `per_node` ranks, its variables set by
    hand as torchrun would set them (GROUP_RANK tells the nodes apart on one host). `popen(node, argv,
    env=...)` starts a rank on a node of a bed; by default every rank runs here, on loopback."""
    if port is None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
    procs = []
    for node in range(nodes):
        for local in range(per_node):
            env = {"RANK": str(node * per_node + local), "WORLD_SIZE": str(nodes * per_node),
                   "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(per_node), "GROUP_RANK": str(node),
                   "MASTER_ADDR": master, "MASTER_PORT": str(port), **env_of(node)}
            argv = [sys.executable, "-m", "clusterbench", *args]
            if popen is None:
                procs.append(subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True))
            else:
                procs.append(popen(node, argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def finish(procs: list[subprocess.Popen], timeout: float = 240) -> list[subprocess.CompletedProcess]:
    """Each process's ending, in order; one still running after `timeout` is killed and fails the test."""
    done = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return done
