"""The documents boundary: every reader of run folders, baselines, loss references, expected tables,
telemetry and training inputs refuses a hostile document in one line (exit 2), never a traceback.

Documents are damaged the way a broken disk or a careless edit would: nested 100,000 deep, NaN,
Infinity or 1e999 where a figure belongs, a schema_version of true, "3", 3.0 or 99, measurements no
machine can make (a duration of 1e-300 s, a world size of 0). Commands that read run folders need no
torch and run in this process; `run` and `train` run as processes side by side.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from conftest import run_side_by_side
from report_fixtures import gpu_run_doc, write_run

from clusterbench.analyse import expected
from clusterbench.cli import main
from clusterbench.errors import UsageError
from clusterbench.inputs import documents
from clusterbench.stages.registry import load_run
from clusterbench.stages.train.references import shipped_dir
from clusterbench.telemetry.records import csv_columns, read_samples

DATA = Path(__file__).parent / "data"
DEEP = 100_000
NAN = "@@raw@@"  # stands in a document for a raw JSON token (NaN, 1e999) json.dumps would not write


def _deep_json() -> str:
    return "[" * DEEP + "]" * DEEP


def _dump(doc: object, raw: str | None = None) -> str:
    """JSON text of `doc`, with every NAN placeholder replaced by the raw token `raw`."""
    text = json.dumps(doc)
    return text.replace(json.dumps(NAN), raw) if raw is not None else text


def _set(path: str, value: object) -> Callable[[dict], None]:
    """A damage: the field at a dotted path (list indices as numbers; * for every item) gets `value`."""
    def damage(doc: dict) -> None:
        *parents, last = path.split(".")
        nodes = [doc]
        for key in parents:
            nodes = [n for node in nodes for n in (node if key == "*" else [node[int(key) if key.isdigit() else key]])]
        for node in nodes:
            node[int(last) if last.isdigit() else last] = value
    return damage


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    code = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (argv, code, err)
    assert lines[0].startswith("clusterbench: error: ") and "Traceback" not in out + err, err
    assert needle in lines[0] and len(lines[0]) < 500, lines[0]


# --- the boundary itself -------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "needle"), [
    (_deep_json(), "nested more than"),
    ('{"a": ' * DEEP + "1" + "}" * DEEP, "nested more than"),
    ('{"busbw": NaN}', "NaN is not a finite number"),
    ('{"busbw": -Infinity}', "-Infinity is not a finite number"),
    ('{"busbw": 1e999}', "1e999 is not a finite number"),
    ("9" * 5000, "too large a number"),
    ('{"count": 9223372036854775808}', "count is 9.22e+18, too large a number"),
    ('{"a": [1, 2', "not valid JSON"),
])
def test_json_beyond_the_bounds_is_one_line(text: str, needle: str) -> None:
    with pytest.raises(UsageError) as e:
        documents.parse_json(text, "doc.json")
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("text", "needle"), [
    ("[" * DEEP + "]" * DEEP, "nested more than"),
    ("- " * DEEP + "1", "nested more than"),
    ("a: .nan", "a is nan, not a finite number"),
    ("figures: [{metric: train.tgs, value: -.inf}]", "figures.0 (train.tgs).value is -inf"),
    ("a: 1.0e999", "a is inf, not a finite number"),
    ("a: 1e999", "a is inf, not a finite number"),
    ("a: " + "9" * 5000, "too large a number"),
    ("a: &x [1]\nb: *x", "anchors and aliases"),
    ("1: one", "not text"),
    ("a: !!set {x, y}", "a set"),
    ("a: !!binary aGVsbG8=", "binary data"),
    ("a: [1, 2", "does not parse"),
])
def test_yaml_beyond_the_bounds_is_one_line(text: str, needle: str) -> None:
    with pytest.raises(UsageError) as e:
        documents.parse_yaml(text, "table.yaml")
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_yaml_dates_stay_the_text_they_were_written_as() -> None:
    assert documents.parse_yaml("source: 2026-10-01", "t") == {"source": "2026-10-01"}


@pytest.mark.parametrize(("value", "needle"), [
    (True, "schema_version true is not a version"), ("3", 'schema_version "3" is not a version'),
    (3.0, "schema_version 3.0 is not a version"), (0, "schema_version 0 is not a version"),
    (None, "schema_version null is not a version"), (99, "versions up to 4: upgrade clusterbench"),
])
def test_a_version_is_a_whole_number_this_clusterbench_knows(value: object, needle: str) -> None:
    with pytest.raises(UsageError, match=None) as e:
        documents.version(value, "run.json", 4, "run.json")
    assert needle in str(e.value)
    assert documents.version(3, "run.json", 4, "run.json") == 3


# --- run folders, through every command that reads them ------------------------------------------

RUN_DAMAGE: dict[str, tuple[Callable[[dict], None] | str, str | None, str]] = {
    # name: (damage, or the whole text; raw token for NAN; what the line must say)
    "nested 100,000 deep": (_deep_json(), None, "nested more than"),
    "extra nested 100,000 deep": (_set("extra", {"x": NAN}), _deep_json(), "nested more than"),
    "busbw NaN": (_set("comm.3.busbw_gbps", NAN), "NaN", "NaN is not a finite number"),
    "busbw Infinity": (_set("comm.0.busbw_gbps", NAN), "Infinity", "Infinity is not a finite number"),
    "tgs 1e999": (_set("train.summary.tgs", NAN), "1e999", "1e999 is not a finite number"),
    "loss -Infinity": (_set("train.losses.4", NAN), "-Infinity", "not a finite number"),
    "schema_version true": (_set("schema_version", True), None, "schema_version true is not a version"),
    'schema_version "3"': (_set("schema_version", "3"), None, 'schema_version "3" is not a version'),
    "schema_version 3.0": (_set("schema_version", 3.0), None, "schema_version 3.0 is not a version"),
    "schema_version 0": (_set("schema_version", 0), None, "schema_version 0 is not a version"),
    "schema_version 99": (_set("schema_version", 99), None, "upgrade clusterbench"),
    "durations 1e-300": (_set("comm.*.duration_us", 1e-300), None, "duration_us: must be at least"),
    "durations 1e300": (_set("comm.*.duration_us", 1e300), None, "duration_us: must be at least"),
    "p50 1e-300": (_set("comm.*.p50_us", 1e-300), None, "p50_us: must be 0 or at least"),
    "min 1e300": (_set("comm.*.min_us", 1e300), None, "min_us: must be 0 or at least"),
    "world size 0": (_set("comm.*.world_size", 0), None, "world_size: must be at least 1, got 0"),
    "env world size -4": (_set("env.world_size", -4), None, "env.world_size: must be at least 1, got -4"),
    "size 0": (_set("comm.2.size_bytes", 0), None, "size_bytes: must be at least 1"),
    "size 1e300": (_set("comm.2.size_bytes", 1e300), None, "expected a whole number"),
    "iters 0": (_set("comm.1.iters", 0), None, "iters: must be at least 1"),
    "wrong -1": (_set("comm.1.wrong", -1), None, "wrong: must be at least 0"),
    "count past 64 bits": (_set("comm.1.count", 2**70), None, "too large a number"),
    "train steps -1": (_set("train.config.steps", -1), None, "steps: must be at least 1"),
    "expected low above high": (_set("expected", {"train.tgs": {
        "value": 5000, "origin": "file", "system": "s", "source": "s", "low": 6000, "high": 5000}}), None,
        "low 6000 is above high 5000"),
    "expected value 0": (_set("expected", {"train.tgs": {
        "value": 0, "origin": "file", "system": "s", "source": "s"}}), None, "value: must be more than 0"),
    "stored fit of 0 ranks": (_set("cost_model", {"stat": "p50", "fits": [{
        "op": "all_reduce", "link": "intra", "world_size": 0, "alpha_us": 5.0, "beta_us_per_byte": 1e-3,
        "bandwidth_gb_s": 10.0, "r2": 0.9, "points": 5}]}), None, "world_size: must be at least 1"),
    "stored fit's sizes reversed": (_set("cost_model", {"stat": "p50", "size_range": [1024, 8]}), None,
                                    "size_range 1024..8 is empty"),
}
READERS = {
    "report": lambda run, good, out: ["report", str(run)],
    "compare": lambda run, good, out: ["compare", str(good), str(run)],
    "baseline": lambda run, good, out: ["baseline", str(good), str(run), "-o", str(out)],
    "align": lambda run, good, out: ["align", str(run), "--reference", "tiny-cpu-float32"],
    "model fit": lambda run, good, out: ["model", "fit", str(run)],
}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A good run folder, its baseline, a copy of the shipped reference; damaged copies go beside them."""
    root = tmp_path_factory.mktemp("documents")
    write_run(root / "good", gpu_run_doc({}))
    write_run(root / "other", gpu_run_doc({}))
    assert main(["baseline", str(root / "good"), str(root / "other"), "-o", str(root / "baseline.json")]) == 0
    shutil.copy(shipped_dir() / "tiny-cpu-float32.json", root / "reference.json")
    return root


def _damaged(home: Path, source: str, name: str, damage: Callable[[dict], None] | str, raw: str | None) -> Path:
    """A copy of `source` (a file under home) with one damage, in a folder of its own."""
    folder = home / "damaged" / f"{Path(source).stem}-{name}".replace(" ", "-")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / Path(source).name
    if isinstance(damage, str):
        path.write_text(damage)
    else:
        doc = json.loads((home / source).read_text())
        damage(doc)
        path.write_text(_dump(doc, raw))
    return path


def test_the_good_documents_are_read(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The damage is what each case refuses: the same commands over the undamaged copies succeed."""
    for folder in (home / "good", DATA / "v1-run", DATA / "v3-comm-run"):
        load_run(folder)
    assert main(["model", "fit", str(home / "good")]) == 0
    assert main(["compare", str(home / "good"), "--baseline", str(home / "baseline.json")]) in (0, 1)
    capsys.readouterr()


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("name", RUN_DAMAGE)
def test_a_damaged_run_folder_is_one_line_in_every_reader(home: Path, capsys: pytest.CaptureFixture[str],
                                                           name: str, reader: str) -> None:
    damage, raw, needle = RUN_DAMAGE[name]
    run = _damaged(home, "good/run.json", name, damage, raw).parent
    out = home / "damaged" / f"{name}-{reader}-baseline.json"
    _refused(capsys, READERS[reader](run, home / "good", out), needle)
    assert not out.exists()


def test_a_version_1_folder_whose_sizes_are_not_sizes_is_one_line(home: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(DATA / "v1-run", home / "v1", dirs_exist_ok=True)
    bad = _damaged(home, "v1/run.json", "sizes-text", _set("comm_options.sizes", ["8", 0]), None)
    _refused(capsys, ["report", str(bad.parent)], "comm_options.sizes: expected a list of sizes")


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_run_json_that_is_no_file_is_named_not_read(home: Path, capsys: pytest.CaptureFixture[str],
                                                      kind: str) -> None:
    folder = home / "damaged" / f"run-json-{kind}"
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(folder / "run.json")
        _refused(capsys, ["model", "fit", str(folder / "run.json")], "FIFO")
    else:
        (folder / "run.json").mkdir()
    _refused(capsys, ["report", str(folder)], "FIFO" if kind == "fifo" else "is a folder, not a regular file")


# --- baselines and loss references ----------------------------------------------------------------

def _tgs(**stats: object) -> Callable[[dict], None]:
    """A damage to the baseline's train.tgs (a metric's name holds dots, so no dotted path reaches it)."""
    return lambda doc: doc["metrics"]["train.tgs"].update(stats)


BASELINE_DAMAGE = {
    "nested": (_deep_json(), None, "nested more than"),
    "mean NaN": (_tgs(mean=NAN), "NaN", "NaN is not a finite number"),
    "count 0": (_tgs(count=0), None, "count: must be at least 1"),
    "min above max": (_tgs(min=1e9), None, "is above max"),
    "schema_version true": (_set("schema_version", True), None, "schema_version true is not a version"),
    "schema_version 1.0": (_set("schema_version", 1.0), None, "schema_version 1.0 is not a version"),
    "schema_version 99": (_set("schema_version", 99), None, "baseline versions up to 1: upgrade clusterbench"),
}
REFERENCE_DAMAGE = {
    "nested": (_deep_json(), None, "nested more than"),
    "loss NaN": (_set("losses.7", NAN), "NaN", "NaN is not a finite number"),
    "loss negative": (_set("losses.7", -2.0), None, "losses[7]: must be more than 0"),
    "lr 1e999": (_set("lr", NAN), "1e999", "1e999 is not a finite number"),
    'schema_version "1"': (_set("schema_version", "1"), None, 'schema_version "1" is not a version'),
    "schema_version 2": (_set("schema_version", 2), None, "loss reference versions up to 1"),
}


@pytest.mark.parametrize("name", BASELINE_DAMAGE)
def test_a_damaged_baseline_is_one_line(home: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    damage, raw, needle = BASELINE_DAMAGE[name]
    bad = _damaged(home, "baseline.json", name, damage, raw)
    _refused(capsys, ["compare", str(home / "good"), "--baseline", str(bad)], needle)
    with pytest.raises(UsageError, match=None) as e:  # --expected takes a baseline too
        expected.load(bad)
    assert needle in str(e.value)


@pytest.mark.parametrize("name", REFERENCE_DAMAGE)
def test_a_damaged_loss_reference_is_one_line(home: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    damage, raw, needle = REFERENCE_DAMAGE[name]
    bad = _damaged(home, "reference.json", name, damage, raw)
    _refused(capsys, ["align", str(home / "good"), "--reference", str(bad)], needle)


def test_a_reference_written_before_versions_needs_a_whole_number_too(home: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    def legacy(doc: dict) -> None:
        del doc["schema_version"]
        doc["format"] = True
    bad = _damaged(home, "reference.json", "format-true", legacy, None)
    _refused(capsys, ["align", str(home / "good"), "--reference", str(bad)], "schema_version true is not a version")


# --- expected tables ------------------------------------------------------------------------------

def _table(**figure: object) -> dict:
    return {"kind": "clusterbench-expected", "schema_version": 1, "systems": [{
        "system": "pod A", "figures": [{"metric": "train.tgs", "value": 5000, "unit": "tokens/GPU/s",
                                        "source": "pod A acceptance"} | figure]}]}


EXPECTED_DAMAGE: dict[str, tuple[str, str]] = {
    "nested YAML": ("[" * DEEP + "]" * DEEP, "nested more than"),
    "nested JSON": ('{"a": ' * DEEP + "1" + "}" * DEEP, "nested more than"),
    "value NaN": (yaml.safe_dump(_table(value=NAN)).replace(f"'{NAN}'", ".nan"), "(train.tgs).value is nan"),
    "value inf": (yaml.safe_dump(_table(value=NAN)).replace(f"'{NAN}'", ".inf"), "(train.tgs).value is inf"),
    "value 1e999 as JSON": (_dump(_table(value=NAN), "1e999"), "(train.tgs).value is inf"),
    "value negative": (yaml.safe_dump(_table(value=-5)), "(train.tgs): 'value' must be a positive number"),
    "value zero": (yaml.safe_dump(_table(value=0)), "(train.tgs): 'value' must be a positive number"),
    "low above high": (yaml.safe_dump(_table(low=6000, high=4000)), "(train.tgs): its range is empty"),
    "value outside its range": (yaml.safe_dump(_table(low=5500, high=6000)), "(train.tgs): value 5000 lies outside"),
    "note a number": (yaml.safe_dump(_table(note=3)), "(train.tgs): 'note' must be text"),
    "metric a number": (yaml.safe_dump(_table(metric=7)), "'metric' is required"),
    "schema_version true": (yaml.safe_dump(_table() | {"schema_version": True}), "schema_version true is not"),
    'schema_version "1"': (yaml.safe_dump(_table() | {"schema_version": "1"}), 'schema_version "1" is not'),
    "schema_version 1.0": (yaml.safe_dump(_table() | {"schema_version": 1.0}), "schema_version 1.0 is not"),
    "schema_version 99": (yaml.safe_dump(_table() | {"schema_version": 99}), "upgrade clusterbench"),
    "unknown top-level key": (yaml.safe_dump(_table() | {"sytems": []}), "unknown key(s) sytems"),
}


@pytest.mark.parametrize("name", EXPECTED_DAMAGE)
def test_a_damaged_expected_table_is_one_line(tmp_path: Path, name: str) -> None:
    text, needle = EXPECTED_DAMAGE[name]
    bad = tmp_path / "fleet.yaml"
    bad.write_text(text)
    with pytest.raises(UsageError) as e:
        expected.load(bad)
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_table_with_a_range_and_its_value_inside_loads(tmp_path: Path) -> None:
    good = tmp_path / "fleet.yaml"
    good.write_text(yaml.safe_dump(_table(low=4000, high=6000)))
    figure = expected.load(good)[0].figures[0].expected
    assert (figure.value, figure.low, figure.high) == (5000, 4000, 6000)


# --- telemetry.csv: the report goes on without it, saying why ------------------------------------

def _telemetry(path: Path, **cells: str) -> Path:
    row = {"t_s": "0.5", "stage": "comm", "host": "h", "device": "GPU0", "rank": "0", "clock_mhz": "1980"} | cells
    path.write_text(",".join(csv_columns()) + "\n" + ",".join(row.get(c, "") for c in csv_columns()) + "\n")
    return path


@pytest.mark.parametrize(("cells", "needle"), [
    ({"clock_mhz": "nan"}, "clock_mhz is nan, not a finite number"),
    ({"power_w": "inf"}, "power_w is inf, not a finite number"),
    ({"t_s": "1e999"}, "t_s is 1e999"),
    ({"rank": "-1"}, "rank: must be at least 0"),
    ({"xid": "x"}, "line 2"),
])
def test_a_damaged_telemetry_csv_is_a_value_error_naming_the_line(tmp_path: Path, cells: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=None) as e:
        read_samples(_telemetry(tmp_path / "telemetry.csv", **cells))
    assert needle in str(e.value) and "line 2" in str(e.value)
    assert len(read_samples(_telemetry(tmp_path / "good.csv"))) == 1


def test_a_telemetry_csv_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "telemetry.csv")
    with pytest.raises(ValueError, match="FIFO"):
        read_samples(tmp_path / "telemetry.csv")
    (tmp_path / "short.csv").write_text(",".join(csv_columns()) + "\n0.5,comm\n")
    with pytest.raises(ValueError, match="line 2"):
        read_samples(tmp_path / "short.csv")


# --- run and train: the bad document is refused before any rank starts ---------------------------

def test_rank_commands_refuse_a_bad_document_before_starting(tmp_path: Path) -> None:
    (tmp_path / "deep.yaml").write_text("[" * DEEP + "]" * DEEP)
    (tmp_path / "range.yaml").write_text(yaml.safe_dump(_table(low=6000, high=4000)))
    (tmp_path / "config.json").write_text('{"model_type": "llama", "rms_norm_eps": NaN}')
    (tmp_path / "data.jsonl").write_text('{"instruction": "a", "output": "b"}\n' + _deep_json() + "\n")
    cases = {
        "run --expected deep": (["run", "--expected", "deep.yaml"], "nested more than"),
        "run --expected low > high": (["run", "--expected", "range.yaml"], "(train.tgs): its range is empty"),
        "train --model-config NaN": (["train", "--model-config", "config.json"], "NaN is not a finite number"),
        "train --data deep line": (["train", "--data", "data.jsonl"], "data.jsonl:2: nested more than"),
    }
    argvs = {name: [*argv, "--out", f"out-{i}"] for i, (name, (argv, _)) in enumerate(cases.items())}
    failures = []
    for name, proc in run_side_by_side(argvs, cwd=tmp_path, timeout=180).items():
        if proc is None:
            failures.append(f"{name}: hung")
            continue
        lines = proc.stderr.strip().splitlines()
        if proc.returncode != 2 or len(lines) != 1 or "Traceback" in proc.stdout + proc.stderr \
                or cases[name][1] not in proc.stderr:
            failures.append(f"{name}: exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
    assert not failures, "\n".join(failures)
    assert not list(tmp_path.glob("out-*/run.json"))


def test_training_inputs_pass_the_boundary(tmp_path: Path) -> None:
    from clusterbench.stages.train.data import load_tokenizer, parse_jsonl  # torch: only for this test

    os.mkfifo(tmp_path / "tokenizer.json")
    with pytest.raises(UsageError, match="FIFO"):
        load_tokenizer(str(tmp_path))
    for line, needle in ((b'{"instruction": NaN, "output": "b"}', "NaN is not a finite number"),
                         (b'{"instruction": "a", "output": "b", "n": 1e999}', "1e999 is not a finite number")):
        with pytest.raises(UsageError, match=None) as e:
            parse_jsonl(line, "data.jsonl")
        assert str(e.value).startswith("data.jsonl:1: ") and needle in str(e.value)
