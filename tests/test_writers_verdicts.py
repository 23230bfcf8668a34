"""Writers that never clobber and verdicts that never pass the unmeasured (issue 18, items 2 and 3),
with the rules, cost-model and plot inputs that used to hang or trace back.

The commands here read run folders and load no torch, so they run in this process. Each refusal is
held to the promise: one line on stderr, exit 2, and every file the user had unchanged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import time
import warnings
from pathlib import Path

import pytest
from report_fixtures import as_run, comm_rows, gpu_run_doc, write_run

from clusterbench.analyse.compare import compare, lost
from clusterbench.analyse.metrics import Metrics
from clusterbench.analyse.rules import Rule, evaluate
from clusterbench.analyse.verdicts import judge, overall
from clusterbench.cli import main
from clusterbench.errors import UsageError
from clusterbench.report.plots import drawable, log_span
from clusterbench.results import codec
from clusterbench.results.run import Env, Run
from clusterbench.stages.comm.cost_model import fit_line, fit_run
from clusterbench.stages.comm.records import COMM, COST_MODEL
from clusterbench.stages.registry import load_run, metrics_of, page, run_folder
from clusterbench.telemetry.records import DeviceStage, Spread, StageWindow, Telemetry, csv_columns

DEEP = 100_000


def _call(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    """The CLI in this process: its exit code (argparse's too), stdout and stderr."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = int(e.code)
    out, err = capsys.readouterr()
    return code, out, err


def _refused(capsys: pytest.CaptureFixture[str], *argv: object, needle: str = "") -> str:
    code, out, err = _call(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (argv, code, out[-500:], err)
    assert lines[0].startswith("clusterbench: error: ") and "Traceback" not in out + err, err
    assert needle in lines[0] and len(lines[0]) < 500, lines[0]
    return lines[0]


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A user's files: a GPU run folder, a second one, and a run with a cost model fitted to its sweep."""
    write_run(tmp_path / "run", gpu_run_doc({}))
    write_run(tmp_path / "other", gpu_run_doc({}))
    sweep = gpu_run_doc({}, comm=comm_rows({"all_reduce": 478.0}), train=None, peaks=None)
    sweep["cost_model"] = codec.dump(fit_run(as_run(sweep)))
    write_run(tmp_path / "sweep", sweep)
    return tmp_path


# --- rules: every field checked, patterns bounded ------------------------------------------------

@pytest.mark.parametrize(("text", "needle"), [
    ("[" * DEEP + "]" * DEEP, "nested more than"),
    ("- metric: 5\n  criteria: '> 0'\n", "metric must be one line of text"),
    ("- metric: [train.tgs, {a: 1}]\n  criteria: '> 0'\n", "metric must be"),
    ("- metric: \"train.tgs\\nhidden\"\n  criteria: '> 0'\n", "metric must be one line"),
    ("- metric: 're:('\n  criteria: '> 0'\n", "not a regular expression"),
    ("- metric: train.tgs\n  criteria: 5\n", "criteria must be text"),
    ("- metric: train.tgs\n  criteria: '> 1e999'\n", "finite number"),
    ("- metric: train.tgs\n  criteria: '>" + "1" * 100_000 + "x'\n", "must be a comparison"),
    ("- metric: train.tgs\n  criteria: '> 0'\n  origin: [[1]]\n", "origin must be"),
    ("- metric: train.tgs\n  criteria: '> 0'\n  name: [1]\n", "name must be text"),
    ("- metric: train.tgs\n  criteria: '> 0'\n  level: [WARN]\n", "level ['WARN'] is not one of"),
    ("- metric: train.tgs\n  criteria: '> 0'\n  missing: no\n", "missing False is not one of"),
    ("- metric: train.tgs\n  criteria: '> 0'\n  summary: [1]\n", "summary must be text"),
])
def test_a_bad_rules_file_is_one_line(home: Path, capsys: pytest.CaptureFixture[str], text: str, needle: str) -> None:
    rules = home / "rules.yaml"
    rules.write_text(text)
    before = _hashes(home)
    _refused(capsys, "compare", home / "run", "--rules", rules, needle=needle)
    assert _hashes(home) == before


def test_a_backtracking_rule_pattern_answers_at_once(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = home / "rules.yaml"
    rules.write_text("- metric: 're:(.|.)*X'\n  criteria: '> 0'\n")
    start = time.monotonic()
    _refused(capsys, "compare", home / "run", "--rules", rules, needle="matches no metric")
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_rules_path_that_is_no_file_is_one_line(home: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    rules = home / "rules.yaml"
    if kind == "fifo":
        os.mkfifo(rules)
    else:
        rules.mkdir()
    _refused(capsys, "compare", home / "run", "--rules", rules, needle="not a regular file")


# --- verdicts: nothing judged, worst of, NaN as missing ------------------------------------------

def test_rules_that_all_skip_judge_nothing(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = home / "rules.yaml"
    rules.write_text("- metric: no.such.metric\n  criteria: '> 0'\n  missing: skip\n")
    _refused(capsys, "compare", home / "run", "--rules", rules, needle="nothing judged")
    _refused(capsys, "compare", home / "run", "--rules", rules, "--json", needle="nothing judged")


def test_a_summary_is_the_worst_of_its_checks(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = home / "rules.yaml"
    rules.write_text("- metric: train.tgs\n  criteria: '> 0'\n"
                     "- metric: train.mfu\n  criteria: '> 0.9'\n  level: WARN\n")
    code, out, _ = _call(capsys, "compare", home / "run", "--rules", rules)
    assert code == 0 and out.splitlines()[-1].startswith("# rules: WARN: 1 of 2 checks pass"), out[-300:]
    # One rule over two metrics, one of them short of its limit: the check is a WARN.
    both = [Rule("both", ("train.tgs", "train.mfu"), "value", "> 0.5", level="WARN")]
    metrics = metrics_of(as_run(gpu_run_doc({})))
    assert sorted(r.verdict for r in evaluate(both, metrics)) == ["PASS", "WARN"]
    assert overall(judge(metrics, {}, both)) == "WARN"


def test_runs_without_a_figure_to_judge_compare_to_nothing(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = write_run(home / "empty", gpu_run_doc({}, comm=[], train=None, peaks=None, verdicts=[]))
    _refused(capsys, "compare", empty, empty, needle="nothing judged")
    code, out, err = _call(capsys, "report", empty)
    assert code == 2 and "nothing judged" in err and len(err.strip().splitlines()) == 1, err
    assert (empty / "report.html").exists() and out.startswith("report: ")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_figure_that_is_not_finite_is_missing_never_passed(bad: float) -> None:
    m = Metrics()
    m.put("train.tgs", bad, "a NaN loss")
    m.put("train.mfu", 0.4)
    assert "train.tgs" not in m.values and "not a measurement" in m.absent["train.tgs"]
    # != 0 holds for NaN: judged, it would have passed.
    skipped = evaluate([Rule("tgs", ("train.tgs",), "value", "!= 0", missing="skip")], m)
    assert [r.verdict for r in skipped] == ["SKIP"] and "not a measurement" in skipped[0].detail
    required = evaluate([Rule("tgs", ("train.tgs",), "value", "!= 0")], m)  # missing: error, yet no typo
    assert [r.verdict for r in required] == ["FAIL"]
    change = evaluate([Rule("tgs", ("train.mfu",), "change", "!= 1")], m, baseline={"train.mfu": bad})
    assert [r.verdict for r in change] == ["FAIL"]
    rows = {r.metric: r for r in compare({"train.tgs": 5000.0, "train.mfu": bad}, {"train.tgs": bad, "train.mfu": 0.4})}
    assert rows["train.tgs"].verdict == rows["train.mfu"].verdict == "MISSING"
    assert [r.metric for r in lost(list(rows.values()))] == ["train.tgs"]


def test_a_run_whose_figures_turned_nan_is_judged_and_drawn_without_a_pass() -> None:
    """A NaN arises in this process (a NaN loss, a time of zero): the verdicts skip it, the plots leave it out."""
    rows = [r for r in comm_rows({"all_reduce": 478.0}) if r["size_bytes"] >= 2**24]
    run = as_run(gpu_run_doc({}, comm=rows, train=None, peaks=None, verdicts=[]))
    COST_MODEL.set(run, fit_run(run))
    for row in COMM.of(run):
        for name in ("busbw_gbps", "duration_us", "p50_us", "p99_us"):
            object.__setattr__(row, name, math.nan)
    object.__setattr__(COMM.of(run)[0], "busbw_gbps", math.inf)
    busbw = [Rule("busbw", ("comm.all_reduce.busbw_gbps.top",), "value", "!= 0", missing="skip")]
    assert [v.status for v in judge(metrics_of(as_run(gpu_run_doc({}))), {}, busbw)] == ["PASS"]
    assert [v.status for v in judge(metrics_of(run), {}, busbw)] == ["SKIP"]
    html = page(run)
    assert html.count('<svg class="plot"') >= 2 and "Overall" in html


def test_a_telemetry_table_without_rows_draws_without_a_word_on_stderr(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    devices = [DeviceStage("comm", "h", f"GPU{i}", "k", i, 5, util_pct=Spread(90.0, 97.0, 99.0)) for i in range(2)]
    doc = gpu_run_doc({}, telemetry=codec.dump(Telemetry(10.0, 1.7e9, [StageWindow("comm", 0.0, 10.0)], devices)))
    run = write_run(tmp_path / "run", doc)
    (run / "telemetry.csv").write_text(",".join(csv_columns()) + "\n")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        code, _, err = _call(capsys, "report", run)
    assert code == 0 and not err and not [str(w.message) for w in said]


def test_figures_at_the_ends_of_a_float_are_drawn_without_a_warning() -> None:
    rows = [r | {"busbw_gbps": 1e300 if i % 2 else 1e-300} for i, r in enumerate(comm_rows({"all_reduce": 478.0}))]
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        html = page(as_run(gpu_run_doc({}, comm=rows, train=None, peaks=None)))
    assert html.count('<svg class="plot"') == 2 and not [str(w.message) for w in said]


def test_plots_draw_only_finite_points() -> None:
    assert drawable([1, 2, 4, 8], [1.0, math.nan, math.inf, 0.0], log=True) == [(1, 1.0)]
    assert drawable([1, 2], [-1.0, math.nan]) == [(1, -1.0)]
    assert log_span([math.nan, math.inf, 0.0]) is None and log_span([1.7e308]) is None
    assert log_span([1.0, math.nan, 13.0]) == pytest.approx((1 / 1.3, 13 * 1.3))


# --- writers: nothing replaced unasked -----------------------------------------------------------

@pytest.mark.parametrize(("argv", "needle"), [
    (["baseline", "{run}", "-o", "{run}/run.json"], "part of the run in"),
    (["baseline", "{run}", "{other}", "-o", "{other}/run.json"], "part of the run in"),
    (["baseline", "{run}", "-o", "{run}"], "is a folder"),
    (["baseline", "{run}", "-o", ""], "is a folder"),
    (["baseline", "{run}", "-o", "{home}/kept.json"], "already exists"),
    (["model", "predict", "--from", "{sweep}", "--nodes", "2", "--inter", "ndr", "--plot", "{sweep}/run.json"],
     "--plot"),
    (["model", "predict", "--from", "{sweep}", "--nodes", "2", "--inter", "ndr", "--plot", "{home}/kept.json"],
     "already exists"),
    (["model", "fit", "{sweep}", "--sizes", "1K..1M", "--save"], "already holds a fit"),
    (["model", "fit", "{sweep}", "--stat", "min", "--save"], "add --overwrite"),
])
def test_a_writer_never_replaces_a_file_unasked(home: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                                needle: str) -> None:
    (home / "kept.json").write_text('{"mine": true}\n')
    before = _hashes(home)
    places = {"run": home / "run", "other": home / "other", "sweep": home / "sweep", "home": home}
    _refused(capsys, *[a.format(**places) for a in argv], needle=needle)
    assert _hashes(home) == before


def test_overwrite_is_the_one_way_to_replace(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kept = home / "kept.json"
    kept.write_text("{}\n")
    assert _call(capsys, "baseline", home / "run", "-o", kept, "--overwrite")[0] == 0
    assert "clusterbench-baseline" in kept.read_text()
    plot = home / "curves.svg"
    predict = ["model", "predict", "--from", home / "sweep", "--nodes", "2", "--inter", "ndr", "--plot", plot]
    assert _call(capsys, *predict)[0] == 0 and plot.read_text().startswith("<svg")
    _refused(capsys, *predict, needle="already exists")
    assert _call(capsys, *predict, "--overwrite")[0] == 0


def test_a_stored_fit_is_replaced_only_by_its_like_or_when_asked(home: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    sweep = home / "sweep"
    code, out, _ = _call(capsys, "model", "fit", sweep, "--save")  # made the same way: the same figures
    assert code == 0 and "stored in" in out
    code, _, _ = _call(capsys, "model", "fit", sweep / "run.json", "--sizes", "1K..1M", "--save", "--overwrite")
    assert code == 0 and tuple(COST_MODEL.of(load_run(sweep)).size_range) == (1024, 1024**2)
    before = _hashes(home)
    _refused(capsys, "model", "fit", sweep, "--save", needle="1 KiB to 1 MiB")
    assert _hashes(home) == before


@pytest.mark.parametrize("target", ["run/run.json", "kept.json"])
def test_a_run_folder_is_never_a_file(home: Path, target: str) -> None:
    (home / "kept.json").write_text("{}\n")
    before = _hashes(home)
    for overwrite in (False, True):
        with pytest.raises(UsageError, match="is a file, not a folder"):
            run_folder(home / target).claim(overwrite)
    assert _hashes(home) == before


def test_a_folder_with_a_runs_files_but_no_run_json_is_claimed_only_when_asked(tmp_path: Path) -> None:
    (tmp_path / "comm.csv").write_text("op,size_bytes\n")
    (tmp_path / "notes.txt").write_text("mine\n")
    with pytest.raises(UsageError, match=r"already holds a run's files \(comm.csv\)"):
        run_folder(tmp_path).claim(overwrite=False)
    assert run_folder(tmp_path).claim(overwrite=True).path == tmp_path
    assert not (tmp_path / "comm.csv").exists() and (tmp_path / "notes.txt").read_text() == "mine\n"


# --- the cost model: impossible inputs refused, extremes fitted ----------------------------------

@pytest.mark.parametrize("argv", [
    ["--nodes", "0", "--gpus-per-node", "8"], ["--nodes", "-3", "--gpus-per-node", "8"],
    ["--nodes", "2", "--gpus-per-node", "0"], ["--nodes", "2", "--gpus-per-node", "-1"],
    ["--nodes", "1", "--gpus-per-node", "1"],
])
def test_a_cluster_of_no_ranks_is_refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    _refused(capsys, "model", "predict", "--intra", "nvlink4", "--inter", "ndr", *argv)


def test_an_empty_size_range_is_not_taken_for_all_sizes(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _refused(capsys, "model", "fit", home / "sweep", "--sizes=", needle="--sizes")


def test_gpus_per_node_zero_is_not_taken_for_not_given(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _refused(capsys, "model", "predict", "--from", home / "sweep", "--nodes", "2", "--inter", "ndr",
             "--gpus-per-node", "0", needle="--gpus-per-node")


@pytest.mark.parametrize("scale", [1e-300, 1e300, 5e-324, 1.7e308])
def test_extreme_times_fit_or_are_refused_in_one_line(scale: float) -> None:
    sizes = [1 << k for k in range(10, 24)]
    every = [(20.0 + s / 8e3) * scale for s in sizes]
    one = [20.0 + s / 8e3 for s in sizes]
    one[5] = scale
    for times in (every, one):
        try:
            line = fit_line(sizes, times)
        except UsageError as e:
            assert "\n" not in str(e)
            continue
        assert all(math.isfinite(v) for v in (line.alpha, line.beta, line.r2)), line


def test_a_row_of_no_ranks_is_refused() -> None:
    run = as_run(gpu_run_doc({}, comm=comm_rows({"all_reduce": 478.0}), train=None, peaks=None))
    object.__setattr__(COMM.of(run)[2], "world_size", 0)
    with pytest.raises(UsageError, match="comm row 2 .* has 0 ranks"):
        fit_run(run)


def test_a_fit_of_times_beyond_a_float_is_refused_before_it_is_stored() -> None:
    run = Run(command="comm", status="complete", env=Env("h", world_size=8),
              sections={"comm": [dataclasses.replace(r, p50_us=r.p50_us * (1e300 if i % 2 else 1e-10))
                                 for i, r in enumerate(COMM.of(as_run(gpu_run_doc({})))) if r.op == "all_reduce"]})
    try:
        model = fit_run(run)
    except UsageError as e:
        assert "\n" not in str(e)
        return
    assert all(math.isfinite(v) for f in model.fits for v in (f.alpha_us, f.beta_us_per_byte, f.r2))
