"""Outputs never clobber what they did not make: every file a command writes at a path the user names is
checked, before anything is measured, against what is there (an earlier file of its own kind is replaced;
anything else only with --overwrite; a run's own files never), against the command's inputs (never, even
with --overwrite) and against the other outputs; and its folder is proved writable. Every refused case
leaves the file that was there byte for byte."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from conftest import assert_one_line_error, run_side_by_side

from clusterbench.errors import UsageError
from clusterbench.results import outputs
from clusterbench.results.fleet import Band, Fleet
from clusterbench.results.folder import save_run
from clusterbench.results.schema import Run


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fleet_run(folder: Path) -> Path:
    folder.mkdir()
    save_run(folder, Run(command="fleet", status="complete", fleet=Fleet(bands=[
        Band("cpu x1", "matmul_tflops", 1.0, 0.1, 8)])))
    return folder


def test_outputs_over_what_they_did_not_make_are_refused_and_left_as_they_were(tmp_path: Path) -> None:
    store = tmp_path / "results.db"
    with sqlite3.connect(store) as db:
        db.execute("CREATE TABLE mine (x)")
    baseline = _fleet_run(tmp_path / "baseline")
    foreign_prom = tmp_path / "node.prom"
    foreign_prom.write_text("node_load1 0.5\n")
    foreign_page = tmp_path / "page.html"
    foreign_page.write_text("<html>my notes</html>\n")
    notes = tmp_path / "notes.txt"
    notes.write_text("buy milk, then reboot n17\n")
    reference = tmp_path / "ref.json"
    reference.write_text('{"kind": "my-notes"}\n')
    kept = [store, baseline / "run.json", foreign_prom, foreign_page, notes, reference]
    before = {p: _digest(p) for p in kept}
    a_file = tmp_path / "a-file"
    a_file.write_text("x\n")
    fleet = ["fleet", "--out", str(tmp_path / "never")]
    cases = {
        "list over a store": [*fleet, "--exclude-out", str(store), "--store", "off"],
        "list over the store in use, overwrite": [*fleet, "--exclude-out", str(store), "--store", str(store),
                                                  "--overwrite"],
        "list over the baseline": [*fleet, "--baseline", str(baseline), "--exclude-out", str(baseline / "run.json"),
                                   "--overwrite"],
        "list over notes": [*fleet, "--exclude-out", str(notes)],
        "list where nothing is written": [*fleet, "--exclude-out", str(a_file / "exclude.txt")],
        "list under /proc": [*fleet, "--exclude-out", "/proc/clusterbench-exclude.txt"],
        "list name too long": [*fleet, "--exclude-out", str(tmp_path / ("x" * 300))],
        "list and textfile one file": [*fleet, "--exclude-out", str(tmp_path / "same.prom"),
                                       "--metrics-textfile", str(tmp_path / "same.prom")],
        "textfile over another exporter's": ["comm", "--metrics-textfile", str(foreign_prom), "--store", "off",
                                             "--out", str(tmp_path / "never2")],
        "out folder is the baseline": [*fleet[:1], "--baseline", str(baseline), "--out", str(baseline),
                                       "--overwrite"],
        "baseline over its input": ["baseline", str(baseline), "-o", str(baseline / "run.json"), "--overwrite"],
        "report over a page": ["history", "--store", str(store), "--report", str(foreign_page)],
        "reference over a file": ["train", "--save-reference", str(reference), "--out", str(tmp_path / "never3")],
    }
    done = run_side_by_side(cases, timeout=120)
    assert_one_line_error(done["list over a store"], 2, "--exclude-out", "not an exclude list clusterbench wrote",
                          "--overwrite")
    assert_one_line_error(done["list over the store in use, overwrite"], 2, "one of this command's inputs")
    assert_one_line_error(done["list over the baseline"], 2, "--exclude-out")
    assert_one_line_error(done["list over notes"], 2, "not an exclude list")
    assert_one_line_error(done["list where nothing is written"], 2, "is not a folder")
    assert_one_line_error(done["list under /proc"], 2, "cannot write in /proc")
    assert_one_line_error(done["list name too long"], 2, "--exclude-out", "cannot be written")
    assert_one_line_error(done["list and textfile one file"], 2, "writes there too")
    assert_one_line_error(done["textfile over another exporter's"], 2, "not a Prometheus textfile clusterbench wrote")
    assert_one_line_error(done["out folder is the baseline"], 2, "--out", "one of this command's inputs")
    assert_one_line_error(done["baseline over its input"], 2, "--output", "part of the run")
    assert_one_line_error(done["report over a page"], 2, "--report", "already exists")
    assert_one_line_error(done["reference over a file"], 2, "--save-reference", "already exists")
    assert {p: _digest(p) for p in kept} == before
    assert not any((tmp_path / name).exists() for name in ("never", "never2", "never3", "same.prom"))


def test_an_earlier_output_of_its_own_kind_is_replaced_and_anything_else_only_with_overwrite(tmp_path: Path) -> None:
    exclude, textfile, page = (outputs.OUTPUTS[k] for k in ("exclude_out", "metrics_textfile", "report"))
    listed = tmp_path / "exclude.txt"
    listed.write_text("gpu-node-017\ngpu-node-018.cluster\n")
    assert outputs.check_one(listed, exclude, overwrite=False) == listed
    (tmp_path / "empty.txt").write_text("")
    assert outputs.check_one(tmp_path / "empty.txt", exclude, overwrite=False)
    prom = tmp_path / "clusterbench.prom"
    prom.write_text('# HELP clusterbench_figure A figure\n# TYPE clusterbench_figure gauge\n'
                    'clusterbench_figure{node="n1"} 3.0\n')
    assert outputs.check_one(prom, textfile, overwrite=False) == prom
    for text in ("root:x:0:0:root:/root:/bin/bash\n", "n1 n2\n", "\x00\x01binary"):
        listed.write_text(text)
        with pytest.raises(UsageError, match="not an exclude list"):
            outputs.check_one(listed, exclude, overwrite=False)
        assert outputs.check_one(listed, exclude, overwrite=True) == listed
    ours = tmp_path / "trends.html"
    ours.write_text("<!DOCTYPE html>\n<html><head><title>clusterbench trends</title></head></html>\n")
    with pytest.raises(UsageError, match="already exists"):  # a page is never replaced unasked, not even ours
        outputs.check_one(ours, page, overwrite=False)
    assert outputs.check_one(ours, page, overwrite=True) == ours
