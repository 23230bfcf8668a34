"""`clusterbench diagnose` on hostile input (issue 18): whatever TARGET holds, one line and exit 2, or
a picture; never a hang or a traceback, and a log of any size read in flat memory."""

from __future__ import annotations

import os
import pickle
import shutil
import socket
import sys
import time
from pathlib import Path

import pytest
from conftest import assert_one_line_error, run_cli
from report_fixtures import gpu_run_doc, write_run

from clusterbench.flight import dumps
from clusterbench.inputs import files
from clusterbench.nccl.log import LINE_WIDTH, parse

FIXTURES = sorted((Path(__file__).parent / "data" / "nccl").glob("*.log"))
# A hang (a FIFO opened for reading waits for a writer forever) fails the test instead of the suite.
TIMEOUT_S = 30
CHANNELS = "2 coll channels, 2 collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer"


def diagnose(target: Path):
    return run_cli("diagnose", str(target), timeout=TIMEOUT_S)


def rank_log(job: int, rank: int, nranks: int = 2, comms: tuple[str, ...] | None = None) -> str:
    """One rank's log as NCCL 2.21 writes it (NCCL_DEBUG=INFO, INIT,NET,GRAPH): bootstrap, network,
    the communicators it sets up (by default the job's one), its rings and links."""
    host, pid = f"job{job:02d}-node{rank}", 4000 + 100 * job + rank
    say = f"{host}:{pid}:{pid} [0] NCCL INFO"
    lines = [f"{say} Bootstrap : Using eth0:10.{job}.0.{rank}<0>", f"{say} cudaDriverVersion 12040"]
    if rank == 0:
        lines.append(f"{say} NCCL version 2.21.5+cuda12.4")
    lines += [f"{say} NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB eth0:10.{job}.0.{rank}<0>",
              f"{say} Using network IB"]
    for n, comm_id in enumerate(comms or (f"0x{job + 1:016x}",)):
        address = f"0x55{job:02x}{n:02x}{rank:08x}"
        comm = f"comm {address} rank {rank} nranks {nranks} cudaDev 0 nvmlDev 0 busId 18000"
        lines += [f"{say} ncclCommInitRank {comm} commId {comm_id} - Init START",
                  f"{say} comm {address} rank {rank} nRanks {nranks} nNodes {nranks} localRanks 1 localRank 0 MNNVL 0"]
        if rank == 0:
            lines += [f"{say} Channel {c:02d}/02 : " + " ".join(map(str, range(nranks))) for c in range(2)]
        lines += [f"{say} Channel {c:02d}/0 : {rank}[0] -> {(rank + 1) % nranks}[0] [send] via NET/IB/{c}/GDRDMA"
                  for c in range(2)]
        lines += [f"{say} Connected all rings", f"{say} {CHANNELS}",
                  f"{say} ncclCommInitRank {comm} commId {comm_id} - Init COMPLETE"]
    return "\n".join(lines) + "\n"


def write_job(folder: Path, job: int, nranks: int = 2) -> list[Path]:
    """A job's logs as NCCL_DEBUG_FILE=folder/nccl.%h.%p.log leaves them: one file per rank."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(nranks):
        path = folder / f"nccl.job{job:02d}-node{rank}.{4000 + 100 * job + rank}.log"
        path.write_text(rank_log(job, rank, nranks))
        paths.append(path)
    return paths


def hazards(folder: Path) -> list[str]:
    """Entries named *.log that are no regular file: a FIFO, a folder, a broken link, a socket."""
    os.mkfifo(folder / "fifo.log")
    (folder / "folder.log").mkdir()
    (folder / "broken.log").symlink_to(folder / "nowhere")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind("socket.log")  # relative: the cwd is the folder (a socket's path is short)
    return ["fifo.log", "folder.log", "broken.log", "socket.log"]


def assert_picture(proc, *needles: str) -> None:
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.startswith("NCCL ") and "== findings" in proc.stdout
    for needle in needles:
        assert needle in proc.stdout, proc.stdout


def test_entries_that_are_no_regular_file_are_left_out_with_one_note(tmp_path: Path, monkeypatch) -> None:
    write_job(tmp_path, 0)
    monkeypatch.chdir(tmp_path)
    left = hazards(tmp_path)
    proc = diagnose(tmp_path)
    assert_picture(proc, "ranks: 2 on 2 node(s) (NCCL: nRanks 2, nNodes 2, 1 local rank)")
    (note,) = proc.stderr.splitlines()
    assert note.startswith("clusterbench: note: left out") and "a FIFO" in note and "a folder" in note
    assert sum(name in note for name in left) == 3 and "1 more" in note  # three named, the rest counted


def test_a_folder_of_nothing_but_such_entries_is_one_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    hazards(tmp_path)
    assert_one_line_error(diagnose(tmp_path), 2, "no run folder or NCCL log", "only regular files are read")


@pytest.mark.parametrize("kind", ["fifo.log", "broken.log", "socket.log"])
def test_a_target_that_is_no_regular_file_is_one_line(tmp_path: Path, monkeypatch, kind: str) -> None:
    monkeypatch.chdir(tmp_path)
    hazards(tmp_path)
    said = {"fifo.log": "a FIFO", "broken.log": "a broken symbolic link", "socket.log": "a socket"}[kind]
    assert_one_line_error(diagnose(tmp_path / kind), 2, said)


@pytest.mark.parametrize("content", [b"", b"\x00\xff\xfe" * 50_000, b"x" * 3_000_000, b"hello\n" * 1000],
                         ids=["empty", "binary", "one-long-line", "text"])
def test_a_file_that_is_not_an_nccl_log_is_one_line(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "x.log").write_bytes(content)
    assert_one_line_error(diagnose(tmp_path / "x.log"), 2, "no NCCL INFO lines")
    assert_one_line_error(diagnose(tmp_path), 2, "no NCCL INFO lines")


def test_the_logs_of_twelve_jobs_are_told_apart(tmp_path: Path) -> None:
    for job in range(12):
        write_job(tmp_path / "all", job)
    assert_one_line_error(diagnose(tmp_path / "all"), 2, "12 jobs", "one job's logs at a time")
    write_job(tmp_path / "one", 7)  # one job's logs alone: its picture
    assert_picture(diagnose(tmp_path / "one"), "NCCL 2.21.5", "ranks: 2 on 2 node(s) (NCCL: nRanks 2, nNodes 2, 1 local rank)")


def test_the_fixture_logs_together_are_as_many_jobs(tmp_path: Path) -> None:
    for log in FIXTURES:
        shutil.copy(log, tmp_path)
    assert len(FIXTURES) == 15
    assert_one_line_error(diagnose(tmp_path), 2, "15 jobs")


def test_ranks_whose_communicators_chain_are_one_job(tmp_path: Path) -> None:
    # Rank 1 shares communicator A with rank 0 and B with rank 2: the three are one job.
    for rank, comms in enumerate([("0xa",), ("0xa", "0xb"), ("0xb",)]):
        (tmp_path / f"nccl.r{rank}.log").write_text(rank_log(0, rank, 3, comms))
    assert_picture(diagnose(tmp_path), "ranks: 3 on 3 node(s)", "rank 2 on job00-node2")


def test_a_run_folders_nccl_logs_pass_the_same_boundary(tmp_path: Path, monkeypatch) -> None:
    run = write_run(tmp_path / "run", gpu_run_doc({}))  # run.json without an nccl section: the logs are read
    write_job(run / "nccl", 3)
    monkeypatch.chdir(run / "nccl")
    hazards(run / "nccl")
    proc = diagnose(run)
    assert_picture(proc, "ranks: 2 on 2 node(s) (NCCL: nRanks 2, nNodes 2, 1 local rank)")
    assert len(proc.stderr.splitlines()) == 1 and "a FIFO" in proc.stderr
    for log in (run / "nccl").glob("nccl.*.log"):
        log.unlink()
    assert_one_line_error(diagnose(run), 2, "holds no NCCL log", "a FIFO")
    for job in range(3):
        write_job(run / "nccl", job)
    assert_one_line_error(diagnose(run), 2, "3 jobs")


def test_a_run_folders_logs_that_name_no_communicator_are_the_runs(tmp_path: Path) -> None:
    # A job that failed before NCCL set up a communicator: its ranks' logs name none, and in the
    # run's own folder they are still the run's.
    run = write_run(tmp_path / "run", gpu_run_doc({}))
    for path in write_job(run / "nccl", 0):
        path.write_text("".join(line for line in path.read_text().splitlines(True) if "commId" not in line))
    assert_picture(diagnose(run), "ranks: 2 on 2 node(s) (NCCL: nRanks 2, nNodes 2, 1 local rank)")
    assert_one_line_error(diagnose(run / "nccl"), 2, "2 jobs", "name none")  # loose, they cannot be tied


def test_a_big_log_with_damaged_lines_is_streamed(tmp_path: Path) -> None:
    # A TUNING line per call grows a log without bound; a damaged one holds lines of any length and
    # numbers of any size. 16 MB here, read in flat memory (a 300 MB one peaks at ~22 MB of RSS).
    say = "job00-node0:4000:4000 [0] NCCL INFO"
    calls = 120_000
    with (tmp_path / "nccl.big.log").open("w") as f:
        f.write(rank_log(0, 0))
        f.write("x" * 3_000_000 + " NCCL INFO " * 1000 + "\n")  # one line of 3 MB
        f.write(f"{say} Channel 00/99999999 :" + " 0" * 50_000 + "\n")
        f.write(f"{say} Channel {'9' * 5000}/0 : 0[0] -> 1[0] via P2P/IPC\n")
        f.write(f"{say} AllReduce: 1048576 Bytes -> Algo RING proto SIMPLE channel{{Lo..Hi}}={{0..1}}\n" * calls)
        f.write(f"{say} AllReduce: 4 Bytes -> Algo TREE proto LL time {'9' * 400}.5\n")
    proc = diagnose(tmp_path / "nccl.big.log")
    assert_picture(proc, f"algorithm: AllReduce 1048576 B -> RING/SIMPLE ({calls} calls)", "channels: 2 collective")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/mem is Linux's")
def test_a_log_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    write_job(tmp_path, 0)
    (tmp_path / "nccl.mem.log").symlink_to("/proc/self/mem")  # a regular file whose read fails (EIO)
    assert_one_line_error(diagnose(tmp_path), 2, "cannot read", "nccl.mem.log")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_a_log_without_read_permission_is_one_line(tmp_path: Path) -> None:
    (log, _) = write_job(tmp_path, 0)
    log.chmod(0)
    assert_one_line_error(diagnose(tmp_path), 2, "cannot read", "Permission denied")
    assert_one_line_error(diagnose(log), 2, "cannot read", "Permission denied")


def test_lines_cuts_a_line_longer_than_its_width(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_text("a" * 10 + "\n" + "b" * 25 + "\n" + "c" * 8 + "\n" + "d" * 16)
    assert list(files.lines(path, "log", width=8)) == ["a" * 8, "b" * 8, "c" * 8, "d" * 8]


def test_a_log_parses_the_same_from_its_lines_as_from_its_text() -> None:
    for log in FIXTURES:
        text = log.read_text()
        assert parse(iter(text.splitlines(True))) == parse(text)
    said = " NCCL INFO Using network IB"
    assert parse("x" * (LINE_WIDTH - len(said)) + said).net.name == "IB"
    assert parse("x" * LINE_WIDTH + said).net.name is None  # longer than NCCL writes: cut, so not read


def _dump_of(entries: list) -> bytes:
    return pickle.dumps({"version": "2.10", "entries": entries}, protocol=2)


ENTRY = {"profiling_name": "nccl:all_reduce", "process_group": ["0", "default_pg"], "state": "completed",
         "retired": True, "collective_seq_id": 1, "input_dtypes": ["Float"]}


def test_the_work_of_a_folder_of_dumps_is_bounded_in_all(tmp_path: Path) -> None:
    """Bytes in all (refused before any is read), entries in all (refused as they pass the bound, each dump
    read at most once), and a list that every entry names through pickle's memo (read once): each answered
    in seconds, however the bounds are reached."""
    many = tmp_path / "many-bytes"
    many.mkdir()
    for rank in range(dumps.MAX_FOLDER_BYTES // dumps.DUMP_LIMIT + 1):
        with open(many / f"nccl_trace_rank_{rank}", "wb") as f:
            f.write(b"\x80\x02")  # a pickle's first bytes: what a dump is known by
            f.truncate(dumps.DUMP_LIMIT)  # sparse: nothing more is written
    references = tmp_path / "many-entries"
    references.mkdir()
    each = dumps.MAX_ENTRIES
    for rank in range(dumps.MAX_FOLDER_ENTRIES // each + 1):  # one record named `each` times: a small file
        (references / f"nccl_trace_rank_{rank}").write_bytes(_dump_of([ENTRY] * each))
    shared = tmp_path / "shared-shapes"
    shared.mkdir()
    shapes = [[1024]] * 200_000  # one list of 200,000 shapes, named by each of 20,000 entries
    for rank in range(2):
        (shared / f"nccl_trace_rank_{rank}").write_bytes(
            _dump_of([{**ENTRY, "collective_seq_id": i, "input_sizes": shapes} for i in range(20_000)]))
    started = time.monotonic()
    assert_one_line_error(diagnose(many), 2, f"more than the {dumps.MAX_FOLDER_BYTES // files.MIB} MiB")
    assert time.monotonic() - started < 5
    assert_one_line_error(diagnose(references), 2, f"more than {dumps.MAX_FOLDER_ENTRIES} entries in its dumps")
    healthy = diagnose(shared)
    assert healthy.returncode == 0 and "every rank completed" in healthy.stdout, healthy.stderr
    assert time.monotonic() - started < TIMEOUT_S
