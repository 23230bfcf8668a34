"""Outputs never clobber what they did not make: every file a command writes at a path the user names is
checked, before anything is measured, against what is there (an earlier file of its own kind, provably
clusterbench's, is replaced; anything else only with --overwrite; a FIFO, a device or a socket, and a run's
own files, never), against the command's inputs (never, even with --overwrite), against the other outputs
and the run's folder; and its folder is proved writable. Every refused case leaves what was there as it was.
The options come from the parsers (fuzz_parsers.py), so a new output option meets the same table."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import sqlite3
import stat
from pathlib import Path

import fuzz_parsers
import pytest
from conftest import assert_one_line_error, run_side_by_side

from clusterbench.errors import UsageError
from clusterbench.results import outputs
from clusterbench.results.documents import Band, write_text
from clusterbench.results.run import Run
from clusterbench.stages.fleet.records import Fleet
from clusterbench.stages.registry import run_folder


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fleet_run(folder: Path) -> Path:
    folder.mkdir()
    run_folder(folder).save(Run(command="fleet", status="complete", sections={"fleet": Fleet(bands=[
        Band("cpu x1", "matmul_tflops", 1.0, 0.1, 8)])}))
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
        "run's reference over its input": ["run", "--train.save-reference", str(reference), "--train.reference",
                                           str(reference), "--overwrite", "--out", str(tmp_path / "never4")],
        "run's list over its baseline": ["run", "--fleet-args", f"--baseline {baseline} --exclude-out {baseline}",
                                         "--overwrite", "--out", str(tmp_path / "never5")],
        "textfile where the run folder goes": ["comm", "--out", str(tmp_path / "never6.prom"), "--metrics-textfile",
                                               str(tmp_path / "never6.prom")],
        "one output a folder of another": ["run", "--fleet.exclude-out", str(tmp_path / "never7"),
                                           "--train.save-reference", str(tmp_path / "never7" / "r.json"),
                                           "--out", str(tmp_path / "never8")],
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
    assert_one_line_error(done["run's reference over its input"], 2, "--train.save-reference",
                          "one of this command's inputs")
    assert_one_line_error(done["run's list over its baseline"], 2, "--fleet.exclude-out")
    assert_one_line_error(done["textfile where the run folder goes"], 2, "the run's folder --out")
    assert_one_line_error(done["one output a folder of another"], 2, "one would be a folder of the other")
    assert {p: _digest(p) for p in kept} == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(("never", "same.prom"))]


def _written(path: Path, text: str, out: outputs.Output) -> None:
    """`text` written at `path` as a command writes an output: checked, written atomically, then marked."""
    planned = outputs.check_one(path, out, overwrite=True)
    write_text(path, text, out.flag)
    outputs.mark([planned])


def test_an_earlier_output_of_its_own_kind_is_replaced_only_where_it_is_provably_ours(tmp_path: Path) -> None:
    exclude, textfile, page = (outputs.OUTPUTS[k] for k in ("exclude_out", "metrics_textfile", "report"))
    listed = tmp_path / "exclude.txt"
    _written(listed, "gpu-node-017\ngpu-node-018.cluster\n", exclude)
    assert outputs.check_one(listed, exclude, overwrite=False).path == listed  # ours: the mark and its bytes
    _written(tmp_path / "none.txt", "", exclude)  # nobody excluded: an empty list, marked as well
    assert outputs.check_one(tmp_path / "none.txt", exclude, overwrite=False)
    planned = outputs.check_one(listed, exclude, overwrite=False)
    outputs.mark([planned])  # not written this time: its mark stays as it was
    assert outputs.check_one(listed, exclude, overwrite=False)
    shutil.copy(listed, tmp_path / "copy.txt")  # a copy carries no mark: provably nobody's
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("n1\nn2\n")  # a word a line, as an exclude list, but the user's
    (tmp_path / "VERSION").write_text("2.4.1\n")
    (tmp_path / "empty").write_text("")
    for path in (tmp_path / "copy.txt", hostfile, tmp_path / "VERSION", tmp_path / "empty"):
        with pytest.raises(UsageError, match="not an exclude list clusterbench wrote"):
            outputs.check_one(path, exclude, overwrite=False)
        assert outputs.check_one(path, exclude, overwrite=True).path == path
    with open(listed, "a") as f:  # edited in place: its bytes are no longer those clusterbench marked
        f.write("gpu-node-099\n")
    with pytest.raises(UsageError, match="not an exclude list clusterbench wrote"):
        outputs.check_one(listed, exclude, overwrite=False)
    prom = tmp_path / "clusterbench.prom"
    prom.write_text('# HELP clusterbench_figure A figure\n# TYPE clusterbench_figure gauge\n'
                    'clusterbench_figure{node="n1"} 3.0\n')
    assert outputs.check_one(prom, textfile, overwrite=False)  # its series speak for it
    (tmp_path / "empty.prom").write_text("")
    with pytest.raises(UsageError, match="not a Prometheus textfile"):
        outputs.check_one(tmp_path / "empty.prom", textfile, overwrite=False)
    ours = tmp_path / "trends.html"
    ours.write_text("<!DOCTYPE html>\n<html><head><title>clusterbench trends</title></head></html>\n")
    with pytest.raises(UsageError, match="already exists"):  # a page is never replaced unasked, not even ours
        outputs.check_one(ours, page, overwrite=False)
    assert outputs.check_one(ours, page, overwrite=True).path == ours


def test_a_fifo_a_device_or_a_socket_is_never_an_output(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "fifo")
    hazards = [tmp_path / "fifo"]
    with contextlib.suppress(PermissionError):  # a device node: root only (CI runs as root)
        os.mknod(tmp_path / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        hazards.append(tmp_path / "null")
    for out in outputs.OUTPUTS.values():
        for path in hazards:
            with pytest.raises(UsageError, match="not a file"):
                outputs.check_one(path, out, overwrite=True)  # not even asked to
        with pytest.raises(UsageError, match="already exists"):
            outputs.check_one(tmp_path / "link", out, overwrite=False)  # a link is nobody's output


def _hazard(root: Path, name: str, kind: str) -> Path:
    """A thing of `kind` at root/name that is not clusterbench's: what an output must never replace."""
    path = root / name
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(name)  # relative: the cwd is root, and a socket's path is short
    elif kind == "link":
        (root / f"{name}.target").write_text("the user's\n")
        path.symlink_to(root / f"{name}.target")
    else:
        path.write_text({"hostfile": "gpu-01\ngpu-02\n", "empty": "", "json": '{"kind": "theirs"}\n'}[kind])
    return path


def _state(root: Path) -> dict[str, tuple[int, str]]:
    """Each thing in root: its type, and its bytes or link target."""
    found = {}
    for p in sorted(root.iterdir()):
        mode = os.lstat(p).st_mode
        what = os.readlink(p) if stat.S_ISLNK(mode) else _digest(p) if stat.S_ISREG(mode) else ""
        found[p.name] = (stat.S_IFMT(mode), what)
    return found


def test_every_output_option_of_every_command_refuses_what_is_not_its_own(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Driven by the parsers (fuzz_parsers.py): every option that names a file a command writes, in every form
    it is typed in (run's --STAGE.option and --STAGE-args), meets a FIFO, a device, and in turn a host file, an
    empty file, a link, a socket and a JSON of someone else's: each is refused in one line naming the option,
    before anything runs, and left as it was."""
    monkeypatch.chdir(tmp_path)  # where a socket is bound by its short, relative name
    hazards = ["fifo", "device"] if os.geteuid() == 0 else ["fifo"]
    others = ["hostfile", "empty", "link", "socket", "json"]
    cases, shown = {}, {}
    for i, option in enumerate(fuzz_parsers.options()):
        for kind in (*hazards, others[i % len(others)]):
            name = f"{i}-{kind}.prom"  # .prom: what a textfile must be named, so its own check is the one met
            _hazard(tmp_path, name, kind)
            out = ["--out", f"never-{i}-{kind}"] if option.has_out else []
            cases[f"{option.shown} ({' '.join(option.command)}) over {kind}"] = [*option.argv(name), *out]
            shown[f"{option.shown} ({' '.join(option.command)}) over {kind}"] = option.shown
    assert len(cases) >= 3 * len(outputs.OUTPUTS)
    before = _state(tmp_path)
    failures = []
    for name, proc in run_side_by_side(cases, cwd=tmp_path, timeout=60).items():
        if proc is None:
            failures.append(f"{name}: hung")
            continue
        err = proc.stderr.strip()
        if proc.returncode != 2 or len(err.splitlines()) != 1 or shown[name] not in err or "Traceback" in err:
            failures.append(f"{name}: exit {proc.returncode}: {err[-300:]}")
    assert not failures, "\n".join(failures)
    assert _state(tmp_path) == before


def test_every_option_that_writes_a_file_is_declared_an_output() -> None:
    """A new option that writes a file is checked as every other is only once results/outputs.py declares it."""
    undeclared = [f"{' '.join(words)} {a.option_strings[-1]}" for words, parser in fuzz_parsers.commands()
                  for a in parser._actions if a.option_strings and fuzz_parsers.said_to_write(a)
                  and a.dest.rpartition(".")[2] not in outputs.OUTPUTS]
    assert undeclared == []


def test_what_a_command_wrote_is_marked_as_its_own(tmp_path: Path) -> None:
    prom = tmp_path / "info.prom"
    proc = run_side_by_side({"info": ["info", "--metrics-textfile", str(prom), "--out", str(tmp_path / "run")]})
    assert proc["info"].returncode == 0, proc["info"].stderr
    mark = os.getxattr(prom, outputs.MARK).decode()
    assert mark == f"textfile sha256={hashlib.sha256(prom.read_bytes()).hexdigest()}"
