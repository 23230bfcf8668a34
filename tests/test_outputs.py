"""Nothing lost, nothing half-written: an earlier run is never overwritten unasked, a full disk is one line."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import assert_one_line_error, read_run, run_cli

QUICK_COMM = ["comm", "--nproc", "2", "-b", "8", "-e", "64", "--iters", "2", "--warmup", "1"]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_an_earlier_run_is_kept_unless_overwrite_is_asked(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert run_cli(*QUICK_COMM, "--out", str(out)).returncode == 0
    before = _snapshot(out)
    for command in (QUICK_COMM, ["info"], ["peak", "--seconds", "0.01", "--size", "16"]):
        proc = run_cli(*command, "--out", str(out))
        assert_one_line_error(proc, 2, f"--out {out} already holds a run", "--overwrite")
        assert _snapshot(out) == before
    proc = run_cli("info", "--out", str(out), "--overwrite")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["run.json"]  # no comm.csv of the run it replaced
    assert read_run(out)["command"] == "info"


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 48 KiB tmpfs: a comm sweep fills it halfway through. Needs root (CI runs as root)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({made.stderr.strip() or 'not root'}): needs root")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_is_one_line_and_leaves_whole_files(small_disk: Path) -> None:
    out = small_disk / "run"
    proc = run_cli("comm", "--nproc", "2", "--ops", "all", "-b", "8", "-e", "64K", "--iters", "2", "--warmup", "1",
                   "--out", str(out), timeout=120)
    assert_one_line_error(proc, 1, "No space left on device")
    doc = json.loads((out / "run.json").read_text())  # the last complete version, whole
    assert doc["status"] in ("running", "failed") and doc["comm"], doc["status"]
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")], os.listdir(out)  # no temporary files
