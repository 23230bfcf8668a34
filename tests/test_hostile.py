"""Every command against a table of hostile input, as a careless or malicious user would type it.

The promise: bad input is one short line on stderr and exit code 2 (1 where a run started and
failed), never a traceback or a hang, and no file the user already had is changed. Damaged
documents are made from a good run folder, a good baseline and the shipped reference; numbers go
out of range; outputs point where nothing can be written. The processes of a table run side by
side, so the table costs little more than its slowest case.
"""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import run_side_by_side
from report_fixtures import gpu_run_doc, write_run

from clusterbench.stages.train.references import shipped_dir

DOCUMENTED_EXITS = {1, 2}
MAX_STDERR_LINES = 2
PARALLEL = 8


def _set(path: str, value: object) -> Callable[[dict], None]:
    """A damage: the field at a dotted path (list indices as numbers) gets `value`; None deletes it."""
    def damage(doc: dict) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        node = doc
        for key in parents:
            node = node[key]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value
    return damage


_DELETE = object()

RUN_DAMAGE = {
    "busbw text": _set("comm.2.busbw_gbps", "fast"),
    "size missing": _set("comm.0.size_bytes", _DELETE),
    "wrong negative": _set("comm.1.wrong", -3),
    "losses text": _set("train.losses.4", "low"),
    "losses null list": _set("train.losses", None),
    "summary tgs list": _set("train.summary.tgs", [1, 2]),
    "alignment limit text": _set("train.alignment.mre_limit", "0.02"),
    "config steps float": _set("train.config.steps", 99.5),
    "verdict status": _set("verdicts.0.status", "GREAT"),
    "status unknown": _set("status", "finished"),
    "env not object": _set("env", "localhost"),
    "peaks copy bool": _set("peaks.copy.0.gbps", True),
    "unknown field": _set("comm.0.speedup", 2),
    "kind foreign": _set("kind", "clusterbench-baseline"),
    "version newer": _set("schema_version", 99),
    "version text": _set("schema_version", "2"),
}
REFERENCE_DAMAGE = {
    "negative band": _set("noise_band", -0.5),
    "losses text": _set("losses.0", "x"),
    "losses short": _set("losses", [2.0, 1.0]),
    "steps missing": _set("steps", _DELETE),
    "kind foreign": _set("kind", "clusterbench-run"),
}
BASELINE_DAMAGE = {
    "mean text": lambda doc: doc["metrics"]["train.tgs"].update(mean="high"),
    "count zero": lambda doc: doc["metrics"]["train.tgs"].update(count=0),
    "metrics list": _set("metrics", []),
}


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's files: a good run folder, a second one, a baseline of both, a copy of the reference."""
    home = tmp_path_factory.mktemp("user")
    write_run(home / "good", gpu_run_doc({}))
    write_run(home / "other", gpu_run_doc({}))
    made = subprocess.run([sys.executable, "-m", "clusterbench", "baseline", str(home / "good"), str(home / "other"),
                           "-o", str(home / "baseline.json")], capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stderr
    (home / "reference.json").write_text((shipped_dir() / "tiny-cpu-float32.json").read_text())
    (home / "a-file").write_text("not a folder\n")
    (home / "blocked").mkdir()
    write_run(home / "blocked", gpu_run_doc({}))
    (home / "blocked" / "report.html").mkdir()  # something in the way of the report
    return home


def _damaged(user: Path, source: str, name: str, damage: Callable[[dict], None]) -> Path:
    doc = json.loads((user / source).read_text())
    doc = copy.deepcopy(doc)
    damage(doc)
    folder = user / "damaged" / f"{source.replace('/', '-')}-{name.replace(' ', '-')}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / Path(source).name
    path.write_text(json.dumps(doc))
    return path


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _run_table(cases: dict[str, list[str]], user: Path) -> None:
    """Run every case (a few at a time) and hold each to the promise."""
    before = _hashes(user)
    failures = []
    for name, proc in run_side_by_side(cases, cwd=user, at_once=PARALLEL).items():
        if proc is None:
            failures.append(f"{name}: hung")
            continue
        lines = proc.stderr.strip().splitlines()
        if proc.returncode not in DOCUMENTED_EXITS:
            failures.append(f"{name}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
        elif "Traceback" in proc.stdout + proc.stderr or len(lines) > MAX_STDERR_LINES or not lines:
            failures.append(f"{name}: stderr was {len(lines)} lines: {proc.stderr.strip()[-300:]}")
    assert not failures, "\n".join(failures)
    assert _hashes(user) == before, "a hostile input changed a file the user already had"


def test_damaged_documents(user: Path) -> None:
    good, other = str(user / "good"), str(user / "other")
    cases: dict[str, list[str]] = {}
    for i, (name, damage) in enumerate(RUN_DAMAGE.items()):
        run = str(_damaged(user, "good/run.json", name, damage))
        # Each damage goes to one reader of run folders, in turn: they all read through one loader.
        reader = [["report", run], ["compare", run, other], ["compare", good, run],
                  ["baseline", good, run, "-o", str(user / "damaged" / f"{name}.json")],
                  ["align", run, "--reference", "tiny-cpu-float32"]][i % 5]
        cases[f"{reader[0]}: {name}"] = reader
    for name, damage in REFERENCE_DAMAGE.items():
        ref = str(_damaged(user, "reference.json", name, damage))
        cases[f"align reference: {name}"] = ["align", good, "--reference", ref]
        cases[f"train reference: {name}"] = ["train", "--reference", ref, "--out", str(user / "never")]
    for name, damage in BASELINE_DAMAGE.items():
        cases[f"compare baseline: {name}"] = ["compare", good, "--baseline",
                                              str(_damaged(user, "baseline.json", name, damage))]
    truncated = user / "damaged" / "truncated"
    truncated.mkdir(parents=True, exist_ok=True)
    (truncated / "run.json").write_text((user / "good" / "run.json").read_text()[:500])
    cases["report: truncated"] = ["report", str(truncated)]
    cases["report: missing"] = ["report", str(user / "nowhere")]
    cases["report: a file"] = ["report", str(user / "a-file")]
    _run_table(cases, user)


OUT_OF_RANGE = {
    "comm": {"--nproc": ["0", "-2"], "--timeout": ["0", "nan", "inf"], "-b": ["0", "-8", "1Q"],
             "-e": ["-1", "lots"], "-f": ["1", "0.5", "nan"], "--iters": ["0", "-3", "many"], "--warmup": ["0"],
             "--time-budget": ["0", "nan", "-1"], "--root": ["-1", "99"], "--dtype": ["complex64"],
             "--ops": ["", "all_reduce,,bogus"]},
    "train": {"--seq-len": ["0", "-64"], "--global-batch": ["0", "1"], "--micro-batch": ["0"], "--steps": ["0"],
              "--warmup-steps": ["-1", "100"], "--lr": ["0", "nan", "-1"], "--lr-warmup-steps": ["-1"],
              "--seed": ["-1", "x"], "--peak-tflops": ["0", "inf"], "--repeats": ["0"], "--mre-limit": ["nan", "0"],
              "--variance-limit": ["-1"], "--preset": ["huge"], "--dtype": ["int8"]},
    "run": {"--peak-seconds": ["-1", "nan"], "--expect-busbw": ["nan", "0", "-5"], "--comm-args": ["--iters 0"],
            "--train-args": ["--seq-len 0", "'unbalanced"], "--skip": ["hardware"]},
    "peak": {"--seconds": ["0", "inf"], "--size": ["0", "-5", "1000000"], "--dtypes": ["int8", ""],
             "--device": ["tpu", "cuda:7"]},
    "compare": {"--tolerance": ["nan", "-0.1", "inf"]},
    "align": {"--mre-limit": ["nan"], "--variance-limit": ["-1"]},
}


def test_numbers_out_of_range(user: Path) -> None:
    leading = {"compare": [str(user / "good"), str(user / "other")],
               "align": [str(user / "good"), "--reference", "tiny-cpu-float32"]}
    cases = {}
    for command, options in OUT_OF_RANGE.items():
        for option, values in options.items():
            for value in values:
                out = [] if command in leading else ["--out", str(user / "never")]
                cases[f"{command} {option} {value!r}"] = [command, *leading.get(command, []), option, value, *out]
    _run_table(cases, user)
    assert not (user / "never").exists()


def test_unwritable_outputs(user: Path) -> None:
    cases = {f"{command} --out /proc": [command, *extra, "--out", "/proc/clusterbench/run"]
             for command, extra in (("comm", []), ("train", []), ("run", []), ("info", []),
                                    ("peak", ["--size", "8", "--seconds", "0.01"]))}
    cases.update({
        "comm --out a file": ["comm", "--out", str(user / "a-file")],
        "comm --out an earlier run": ["comm", "--out", str(user / "good")],
        "train --save-reference /proc": ["train", "--save-reference", "/proc/clusterbench/ref.json",
                                         "--out", str(user / "never")],
        "baseline -o /proc": ["baseline", str(user / "good"), "-o", "/proc/clusterbench/b.json"],
        "report in the way": ["report", str(user / "blocked")],
    })
    _run_table(cases, user)


def test_a_baseline_of_nothing_measured_is_refused(user: Path) -> None:
    """A baseline is never of nothing: a run that measured nothing (an info run) is refused, alone or among
    others, and no file is written."""
    doc = {k: v for k, v in gpu_run_doc({}).items() if k not in ("comm", "train", "peaks", "verdicts", "comm_options")}
    write_run(user / "damaged" / "info-run", doc | {"command": "info"})
    out = user / "damaged" / "of-nothing.json"
    done = run_side_by_side({
        "alone": ["baseline", str(user / "damaged" / "info-run"), "-o", str(out)],
        "among others": ["baseline", str(user / "good"), str(user / "damaged" / "info-run"), "-o", str(out)],
    })
    for proc in done.values():
        assert proc.returncode == 2 and "holds no measured figure" in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()
