"""`store import` never poisons a store: a run folder whose name or fields hold what the store's readers refuse
(a tab, a newline, a bell, a non-breaking space, a byte that is no UTF-8, a name past its column) is skipped in
one line naming the folder and the field, the rest recorded; and every reader then reads the store. Writers and
readers hold text to one rule (store/values.unfit)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from report_fixtures import gpu_run_doc, write_run

HARDWARE = {"hostname": "gpu-node-01", "cpu": {"model": "Xeon Gold", "logical_cores": 2}, "gpus": []}
# Folder name (bytes: a name need not be UTF-8) -> (run.json's changes, the field the line names).
HOSTILE = {
    b"run\ttab": ({}, "runs.folder"),
    b"run\nnewline": ({}, "runs.folder"),
    b"run\x07bell": ({}, "runs.folder"),
    "run\u00a0nbsp".encode(): ({}, "runs.folder"),
    b"run\xffbyte": ({}, "runs.folder"),
    b"cpu-tab": ({"hardware": {**HARDWARE, "cpu": {"model": "Xeon\tGold", "logical_cores": 2}}}, "klass"),
    b"host-bell": ({"env": {"hostname": "node\x07", "world_size": 1}}, "runs.host"),
    b"command-long": ({"command": "c" * 40}, None),  # a command is one of clusterbench's: refused as it is read
}


def test_an_import_skips_what_readers_would_refuse_and_the_store_stays_readable(tmp_path: Path) -> None:
    root = os.fsencode(tmp_path / "runs")
    folders = []
    for i, (name, (changes, _)) in enumerate(HOSTILE.items()):
        doc = gpu_run_doc(HARDWARE) | {"uid": f"hostile{i}"} | changes
        folders.append(os.path.join(root, name))
        write_run(Path(os.fsdecode(folders[-1])), doc)
    folders.append(os.fsencode(write_run(tmp_path / "runs" / "good", gpu_run_doc(HARDWARE) | {"uid": "good"})))
    db = tmp_path / "s.db"
    proc = subprocess.run([sys.executable, "-m", "clusterbench", "store", "import", *folders, "--store", str(db)],
                          capture_output=True, check=False)
    out, err = proc.stdout.decode(), proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 1, err  # folders skipped: said, the rest recorded
    assert f"1 recorded, 0 already there, {len(HOSTILE)} skipped" in out, out
    skipped = err.splitlines()
    assert len(skipped) == len(HOSTILE) and all(line.startswith("# skipped ") for line in skipped), err
    assert "Traceback" not in err and "internal error" not in err
    for name, (_, field) in HOSTILE.items():
        shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in os.fsdecode(name))
        line = next((line for line in skipped if f"/{shown}:" in line), None)
        assert line is not None, (shown, err)
        assert field is None or field in line, line
    for reader in (["history", "--runs"], ["store", "info"], ["history"]):
        read = subprocess.run([sys.executable, "-m", "clusterbench", *reader, "--store", str(db)],
                              capture_output=True, text=True, check=False)
        assert read.returncode == 0 and read.stderr == "", (reader, read.stderr)
