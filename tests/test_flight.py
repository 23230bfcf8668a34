"""Hangs: which rank, which collective, from PyTorch's Flight Recorder dumps (src/clusterbench/flight/).

One real Gloo job hangs on purpose (tests/flight_ranks.py: rank 2 skips an all_reduce) and dumps
through flight/record.py; the other cases read real dumps that the same script made and
tests/data/flight/PROVENANCE.md describes, or real files damaged on purpose.
"""

from __future__ import annotations

import os
import pickle
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import assert_one_line_error, run_cli

from clusterbench.errors import UsageError
from clusterbench.flight import diagnose, is_dump_folder, record
from clusterbench.flight.dumps import hosts_from_names

DATA = Path(__file__).parent / "data" / "flight"
SKIP, MISMATCH, HEALTHY = DATA / "gloo-2.10-skip", DATA / "gloo-2.10-mismatch-json", DATA / "gloo-2.10-healthy"
RANKS = Path(__file__).parent / "flight_ranks.py"


def findings(lines: list[str], kind: str) -> list[str]:
    return [line.strip() for line in lines if line.strip().startswith(kind)]


def test_a_rank_that_skips_an_all_reduce_is_named_with_its_host(tmp_path: Path) -> None:
    """Three real Gloo ranks with the recorder on; rank 2 never calls the fourth all_reduce."""
    proc = subprocess.run([sys.executable, "-W", "ignore", str(RANKS), "skip", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"nccl_trace_rank_{r}" for r in range(3)]
    lines, code = diagnose(tmp_path)
    assert code == 1, lines
    (culprit,) = findings(lines, "CULPRIT")
    host = socket.gethostname()
    assert culprit.startswith(f"CULPRIT  rank 2 (on {host}) never entered all_reduce #4 of process group 0 "
                              "(default_pg), input [256] float32; ranks 0-1 (on "), culprit
    assert "wait in it" in culprit and "its last in this group: #3" in culprit
    assert "hosts not recorded" not in lines[0]


def test_the_cli_names_the_culprit_of_a_folder_of_torch_dumps() -> None:
    """Torch's own pickles, no host in them: `clusterbench diagnose DUMP_DIR` (wired to flight.diagnose)."""
    proc = run_cli("diagnose", str(SKIP))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "hosts not recorded" in proc.stdout
    assert ("rank 2 never entered all_reduce #4 of process group 0 (default_pg), input [256] float32; "
            "ranks 0-1 wait in it") in proc.stdout


def test_a_rank_calling_another_collective_is_a_mismatch() -> None:
    """Torch's JSON dumps: rank 2 called all_gather where ranks 0-1 called all_reduce, all three blocked."""
    lines, code = diagnose(MISMATCH)
    assert code == 1
    (mismatch,) = findings(lines, "MISMATCH")
    assert mismatch == ("MISMATCH rank 2 called all_gather, input [256] float32, output [3, 256] float32 at #4 of "
                        "process group 0 (default_pg), where ranks 0-1 called all_reduce, input [256] float32")
    assert not findings(lines, "CULPRIT") and not findings(lines, "HANG")


def test_a_healthy_job_says_so_per_group() -> None:
    lines, code = diagnose(HEALTHY)
    assert code == 0
    assert findings(lines, "HEALTHY") == [
        "HEALTHY  process group 0 (default_pg): every rank completed the collectives it recorded, up to #4",
        "HEALTHY  process group 1 (pair): every rank completed the collectives it recorded, up to #1"]
    assert lines[-1].startswith("verdict: healthy")


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_a_rank_without_a_dump_is_named_and_the_newest_of_two_dumps_wins(tmp_path: Path) -> None:
    folder = _copy(SKIP, tmp_path / "dumps")
    (folder / "nccl_trace_rank_1").unlink()
    stale = folder / "fr_2"
    shutil.copy(HEALTHY / "nccl_trace_rank_2", stale)  # an older dump of rank 2, from another job
    older = (folder / "nccl_trace_rank_2").stat().st_mtime - 3600  # the copies keep the fixtures' own times
    os.utime(stale, (older, older))
    lines, code = diagnose(folder)
    assert code == 1
    assert "  no dump from rank 1" in lines
    assert any("rank 2: 2 dumps; the newest, nccl_trace_rank_2, is read (fr_2 left out)" in line for line in lines)
    culprits = findings(lines, "CULPRIT")
    assert any(c.startswith("CULPRIT  rank 2 never entered all_reduce #4") for c in culprits), culprits
    assert any(c.startswith("CULPRIT  rank 1 left no dump") for c in culprits), culprits


def test_a_record_that_lags_behind_its_collective_does_not_hide_the_culprit(tmp_path: Path) -> None:
    """Gloo retires an op when its work is next looked at: a rank dumped at the wrong moment still shows its third
    all_reduce pending, which the others completed. Seen on a loaded CI runner with the real job of the test above."""
    folder = _copy(SKIP, tmp_path / "dumps")
    doc = pickle.loads((folder / "nccl_trace_rank_2").read_bytes())
    doc["entries"][-1] = dict(doc["entries"][-1], retired=False)
    (folder / "nccl_trace_rank_2").write_bytes(pickle.dumps(doc, protocol=2))
    lines, code = diagnose(folder)
    assert code == 1
    assert any(c.startswith("CULPRIT  rank 2 never entered all_reduce #4") for c in findings(lines, "CULPRIT")), lines


def test_send_without_its_recv_is_named(tmp_path: Path) -> None:
    """Gloo records no point-to-point ops, so real dumps get NCCL-shaped send/recv entries written into them."""
    for rank in (0, 1):
        doc = pickle.loads((HEALTHY / f"nccl_trace_rank_{rank}").read_bytes())
        entry = dict(doc["entries"][0], is_p2p=True, collective_seq_id=0, p2p_seq_id=1, retired=False,
                     state="scheduled", profiling_name="nccl:send 0->1" if rank == 0 else "nccl:recv 1<-0")
        doc["entries"] = doc["entries"][:4] + ([entry] if rank == 0 else [])
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(doc, protocol=2))
    lines, code = diagnose(tmp_path)
    assert code == 1
    assert findings(lines, "P2P") == [("P2P      rank 0 waits in send p2p #1 to rank 1 of process group 0 (default_pg) "
                                       "(send, input [256] float32); rank 1 posted no matching recv")]


class _Mkdir:
    """A pickle that, loaded by plain pickle.load, would create a folder: the proof nothing runs."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (str(self.path),))


def _bomb() -> bytes:
    """A few hundred bytes whose memo references unfold into 2**30 values."""
    out = [b"\x80\x02]q\x00."[:-1]]  # PROTO 2, EMPTY_LIST, BINPUT 0
    for i in range(1, 31):
        out.append(b"h" + bytes([i - 1]) + b"h" + bytes([i - 1]) + b"\x86q" + bytes([i]))  # (prev, prev) -> memo i
    return b"".join(out) + b"."


def _damaged(tmp_path: Path) -> dict[str, tuple[bytes, str]]:
    real = (SKIP / "nccl_trace_rank_0").read_bytes()
    newer = pickle.loads(real)
    newer["version"] = "3.0"
    return {
        "truncated": (real[: len(real) // 2], "truncated"),
        "text": (b"hello, not a dump\n", "neither a pickle nor JSON"),
        "empty": (b"", "empty"),
        "object": (pickle.dumps(_Mkdir(tmp_path / "pwned"), protocol=2), "names the Python object posix.mkdir"),
        "bomb": (_bomb(), "unfold into more values"),
        "foreign-json": (b'{"entries": []}', "no format version"),
        "bad-entry": (pickle.dumps({"version": "2.10", "entries": [{"state": "completed"}]}), "profiling_name"),
        "newer": (pickle.dumps(newer, protocol=2), "upgrade clusterbench"),
        "bytes": (pickle.dumps({"version": "2.10", "entries": [b"\x00"]}, protocol=4), "binary data"),
    }


@pytest.mark.parametrize("case", ["truncated", "text", "empty", "object", "bomb", "foreign-json", "bad-entry",
                                  "newer", "bytes"])
def test_a_damaged_or_foreign_file_is_one_line_naming_it(tmp_path: Path, case: str) -> None:
    data, needle = _damaged(tmp_path)[case]
    folder = _copy(SKIP, tmp_path / "dumps")
    (folder / "nccl_trace_rank_1").write_bytes(data)
    start = time.monotonic()
    with pytest.raises(UsageError) as e:
        diagnose(folder)
    assert time.monotonic() - start < 5
    message = str(e.value)
    assert len(message.splitlines()) == 1 and str(folder / "nccl_trace_rank_1") in message and needle in message
    assert not (tmp_path / "pwned").exists()


def test_the_cli_refuses_a_damaged_dump_in_one_line(tmp_path: Path) -> None:
    folder = _copy(SKIP, tmp_path / "dumps")
    (folder / "nccl_trace_rank_2").write_bytes((SKIP / "nccl_trace_rank_2").read_bytes()[:100])
    assert_one_line_error(run_cli("diagnose", str(folder)), 2, "nccl_trace_rank_2", "truncated")


def test_a_folder_without_dumps_says_so(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing here")
    assert not is_dump_folder(tmp_path)
    with pytest.raises(UsageError, match="no Flight Recorder dumps in it.*notes.txt"):
        diagnose(tmp_path)
    assert is_dump_folder(SKIP) and is_dump_folder(MISMATCH)
    assert not is_dump_folder(SKIP / "nccl_trace_rank_0")


def test_hosts_come_from_names_only_where_they_differ_in_one_part() -> None:
    assert hosts_from_names({5: "nccl_trace_rank_container-node02_", 40: "nccl_trace_rank_container-node07_"}) == {
        5: "container-node02", 40: "container-node07"}
    assert hosts_from_names({0: "nccl_trace_rank_", 1: "nccl_trace_rank_"}) == {}  # one prefix: no host in it
    assert hosts_from_names({0: "nccl_trace_rank_", 1: "fr_"}) == {}  # two prefixes, not hosts
    assert hosts_from_names({0: "job_1_", 1: "job_2_"}) == {}  # digits alone are no host name
    assert hosts_from_names({0: "a_x_", 1: "b_y_"}) == {}  # two parts differ: which one is the host?


def test_the_recorder_environment_respects_the_user() -> None:
    new = record._torch_version() >= record.NEW_NAMES_SINCE  # torch 2.13, the tests' pin: the new names
    buffer, prefix = (name for names in (record.BUFFER_VARS, record.DUMP_PREFIX_VARS) for name in [names[not new]])
    assert record.environment(Path("/runs/x"), environ={}) == {
        buffer: str(record.DEFAULT_BUFFER), prefix: "/runs/x/nccl_trace_rank_"}
    assert record.environment(environ={"TORCH_NCCL_TRACE_BUFFER_SIZE": "20000"}) == {}  # the user's, by either name
    assert record.environment(environ={"TORCH_FR_BUFFER_SIZE": "20000"}) == {}
