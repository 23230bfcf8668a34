"""`clusterbench comm` as users run it: real gloo ranks, real files, every error path."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest
from conftest import assert_one_line_error, read_run, run_cli

from clusterbench.collectives import ALL_OPS
from clusterbench.results.run import SCHEMA_VERSION
from clusterbench.stages.comm.records import CommRow

COMM_COLUMNS = [f.name for f in fields(CommRow)]

FAST = ["--iters", "3", "--warmup", "1"]
COLUMNS = ["Size (Bytes)", "Description", "Duration", "Throughput (Gbps)", "BusBW (Gbps)", "#wrong"]


def test_table_run_json_and_csv(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("comm", "--nproc", "2", "--ops", "all", "-b", "8", "-e", "4K", "-f", "4", *FAST, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    header = next(line for line in proc.stdout.splitlines() if line.lstrip().startswith("Size (Bytes)"))
    assert header.split("  ") and [c.strip() for c in header.split("  ") if c.strip()] == COLUMNS
    assert proc.stdout.count("Avg bus bandwidth") == 9  # one summary per op of `--ops all`

    doc = read_run(out)
    assert doc["schema_version"] == SCHEMA_VERSION and doc["status"] == "complete"
    assert doc["command"] == "comm" and "comm" in doc["argv"]
    env = doc["env"]
    for key in ("hostname", "torch", "backend", "backend_version", "world_size", "devices"):
        assert key in env
    assert env["backend"] == "gloo" and env["world_size"] == 2 and len(env["devices"]) == 2
    rows = doc["comm"]
    required = {"op", "size_bytes", "count", "dtype", "world_size", "in_place", "duration_us",
                "throughput_gbps", "busbw_gbps", "wrong", "iters", "p50_us", "p99_us", "cv"}
    assert all(required <= set(r) for r in rows)
    assert {r["op"] for r in rows} == set(ALL_OPS)
    assert all(r["wrong"] == 0 and r["iters"] == 3 for r in rows)
    with open(out / "comm.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(rows) and list(table[0]) == COMM_COLUMNS


@pytest.mark.parametrize("n", [2, 3, 4])
def test_size_and_bandwidth_follow_nccl_tests(n: int, tmp_path: Path) -> None:
    """REFERENCE.md section 1: algbw = S/t, busbw = algbw x factor(n), S rounded to whole chunks."""
    out = tmp_path / "run"
    proc = run_cli("comm", "--nproc", str(n), "--ops", "all", "-b", "1000", "-e", "1000", *FAST,
                   "--no-check", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    factors = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
               "all_to_all": (n - 1) / n, "gather": (n - 1) / n, "scatter": (n - 1) / n,
               "broadcast": 1.0, "reduce": 1.0, "pt2pt": 1.0}
    chunked = {"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"}
    for row in read_run(out)["comm"]:
        elems = 1000 // 4
        want_count = elems - elems % n if row["op"] in chunked else elems
        assert row["count"] == want_count and row["size_bytes"] == want_count * 4, row
        algbw = row["size_bytes"] / (row["duration_us"] * 1e-6)
        assert row["throughput_gbps"] == pytest.approx(algbw * 8 / 1e9, rel=1e-9)
        assert row["busbw_gbps"] == pytest.approx(algbw * factors[row["op"]] * 8 / 1e9, rel=1e-9)


def test_bidirectional_counts_both_directions_and_gbps_unit(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("comm", "--nproc", "2", "--ops", "pt2pt", "--bidirectional", "-b", "64K", "-e", "64K",
                   *FAST, "--unit", "GBps", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "Throughput (GB/s)" in proc.stdout and "BusBW (GB/s)" in proc.stdout
    (row,) = read_run(out)["comm"]
    assert row["op"] == "pt2pt_bidir" and row["busbw_gbps"] == pytest.approx(2 * row["throughput_gbps"])


def test_auto_iterations_adapt_to_size(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("comm", "--nproc", "2", "-b", "8", "-e", "4M", "-f", "512", "--time-budget", "0.05",
                   "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = read_run(out)["comm"]
    assert [r["size_bytes"] for r in rows] == [8, 4096, 2 * 1024**2, 4 * 1024**2]
    assert all(r["iters"] >= 3 for r in rows)  # how many more a small message gets: test_comm_units
    for r in rows:
        assert r["min_us"] <= r["p50_us"] <= r["p99_us"] <= r["max_us"] and r["cv"] >= 0


def test_in_place_variants_are_checked(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("comm", "--nproc", "3", "--ops", "all_gather,reduce_scatter", "--in-place", "-b", "96",
                   "-e", "96K", "-f", "32", *FAST, "--dtype", "bfloat16", "--reduce-op", "max", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = read_run(out)["comm"]
    assert rows and all(r["in_place"] and r["wrong"] == 0 and r["dtype"] == "bfloat16" for r in rows)
    assert "in-place" in proc.stdout


def test_corrupted_result_is_caught(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("comm", "--nproc", "2", "--ops", "all_reduce,all_gather", "-b", "1K", "-e", "1K", *FAST,
                   "--out", str(out), env={"CLUSTERBENCH_TEST_CORRUPT": "all_gather:1"})
    err = assert_one_line_error(proc, 1, "all_gather", "1024 B")
    assert "all_reduce" not in err
    rows = {r["op"]: r for r in read_run(out)["comm"]}
    assert rows["all_gather"]["wrong"] == 1 and rows["all_reduce"]["wrong"] == 0
    assert read_run(out)["status"] == "failed"


@pytest.mark.parametrize("fault, needle", [("kill:1:3", "rank 1 died"), ("hang:1:3", "rank 1 stopped responding")])
def test_a_dead_or_stuck_rank_ends_the_run_and_keeps_rows(fault: str, needle: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    # --timeout also bounds the rendezvous, which three ranks importing torch on two busy cores can take seconds to
    # reach: 10 s keeps the hang case short without racing their start.
    proc = run_cli("comm", "--nproc", "3", "-b", "8", "-e", "1K", *FAST, "--timeout", "10", "--out", str(out),
                   env={"CLUSTERBENCH_TEST_FAULT": fault}, timeout=90)
    err = assert_one_line_error(proc, 1, needle, "all_reduce")
    doc = read_run(out)
    assert doc["status"] == "failed" and needle in doc["error"]
    assert len(doc["comm"]) == 2  # the two sizes measured before the fault
    if fault.startswith("hang"):  # every rank's Flight Recorder, the stuck one's too, names it and the collective
        assert "Flight Recorder: rank 1 (on " in err and "never entered all_reduce #" in err, err
        said = run_cli("diagnose", str(out))
        assert said.returncode == 1 and "CULPRIT  rank 1 (on " in said.stdout, said.stdout + said.stderr


def test_every_row_is_on_disk_as_it_arrives_though_rank_0_dies(tmp_path: Path) -> None:
    """run.json, which grows with the run, is rewritten only now and then; each row is appended to
    comm.csv as it arrives, so rank 0 killed mid-sweep loses none of the rows measured before, and the
    supervisor brings them into run.json."""
    out = tmp_path / "run"
    proc = run_cli("comm", "--nproc", "2", "-b", "8", "-e", "1K", *FAST, "--timeout", "10", "--out", str(out),
                   env={"CLUSTERBENCH_TEST_FAULT": "kill:0:4"}, timeout=90)
    assert_one_line_error(proc, 1, "rank 0 died")
    with open(out / "comm.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["size_bytes"]) for r in rows] == [8, 16, 32]  # the three sizes before the fault, whole
    assert all(list(r) == COMM_COLUMNS and None not in r.values() for r in rows)
    doc = read_run(out)
    assert doc["status"] == "failed" and [r["size_bytes"] for r in doc["comm"]] == [8, 16, 32]


def test_ctrl_c_stops_every_rank_and_keeps_rows(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # A terminal's foreground command takes Ctrl-C, but a pytest started in the background (`cmd &` in a
    # script) ignores SIGINT, and so would the run it starts (nohup's promise, which the run keeps). A signal
    # with a handler here is back to its default in the program started.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "clusterbench", "comm", "--nproc", "2", "--ops", "all", "-e", "64M",
             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
    finally:
        signal.signal(signal.SIGINT, before)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if len(read_run(out).get("comm", [])) >= 2:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole process group
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    doc = read_run(out)
    assert doc["status"] == "interrupted" and len(doc["comm"]) >= 2
    assert _group_empty(proc.pid, within_s=10), "a rank outlived the interrupted run"


def _group_empty(pgid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, check=False).stdout.strip():
            return True
        time.sleep(0.2)
    return False


def test_joins_a_torchrun_job(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "clusterbench", "comm", "-b", "1K", "-e", "1K", *FAST, "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = read_run(out)
    assert doc["env"]["world_size"] == 2 and doc["status"] == "complete"  # joined the launcher's job


BAD_INPUT = [
    (["--ops", "all_reduce,bogus"], "unknown op 'bogus'"),
    (["--dtype", "complex64"], "unknown dtype"),
    (["-b", "1M", "-e", "1K"], "larger than --max-bytes"),
    (["-b", "0"], "must be positive"),
    (["-e", "lots"], "cannot read 'lots'"),
    (["-f", "1"], "greater than 1"),
    (["--backend", "nccl"], "nccl needs CUDA"),
    (["--backend", "mpi"], "no MPI support"),
    (["--backend", "warpdrive"], "unknown backend"),
    (["--ops", "pt2pt", "--nproc", "1"], "at least 2 ranks"),
    (["--root", "5"], "--root 5"),
    (["--iters", "0"], "at least 1"),
    (["--timeout", "nan"], "--timeout"),
    (["--time-budget", "nan"], "--time-budget"),
    (["--out", "/proc/clusterbench-cannot-write"], "the run folder: cannot write in"),
    (["-e", "4G", "--nproc", "64"], "memory"),
    (["--frobnicate"], "unrecognized arguments"),
    (["--dtype", "int32", "--reduce-op", "avg"], "cannot run all_reduce on int32 with reduce op avg"),
]


@pytest.mark.parametrize("args, needle", BAD_INPUT, ids=[b[1] for b in BAD_INPUT])
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str, tmp_path: Path) -> None:
    proc = run_cli("comm", *FAST, "-e", "1K", "--out", str(tmp_path / "run"), *args)
    assert_one_line_error(proc, 2, needle)
    assert json.dumps(proc.stderr)  # printable


@pytest.mark.parametrize("mode", ["stamps", "loop"])
def test_each_timing_mode_runs_and_is_named(mode: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("comm", "--nproc", "2", "-b", "1K", "-e", "4K", "--timing", mode, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert f"# all_reduce (timing: {mode})" in proc.stdout
    rows = read_run(out)["comm"]
    assert rows and all(r["timing"] == mode and r["wrong"] == 0 for r in rows)


def test_graph_timing_is_refused_without_cuda(tmp_path: Path) -> None:
    proc = run_cli("comm", "--nproc", "2", "--timing", "graph", "--out", str(tmp_path / "run"))
    assert_one_line_error(proc, 2, "--timing graph", "use --timing loop or stamps")
