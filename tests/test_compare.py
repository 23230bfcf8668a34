"""compare, rules and baseline: metrics, verdicts, exit codes and every bad-input path."""

import json
from pathlib import Path

import pytest
from conftest import assert_one_line_error, run_cli, run_side_by_side
from report_fixtures import as_run, gpu_run_doc, train_section, write_run

from clusterbench.analyse.compare import compare, lost, worse
from clusterbench.analyse.metrics import kind_of, size_class
from clusterbench.results.run import SCHEMA_VERSION
from clusterbench.stages.registry import metrics_of


def run_doc(tgs: float = 5120.0, mre: float = 0.006, verdict: str = "PASS") -> dict:
    return gpu_run_doc({}, train=train_section(tgs=tgs, mre=mre, verdict=verdict))


def flatten(doc: dict) -> dict[str, float]:
    return metrics_of(as_run(doc)).values


@pytest.fixture
def runs(tmp_path: Path) -> dict[str, Path]:
    return {
        "a": write_run(tmp_path / "a", run_doc()),
        "same": write_run(tmp_path / "same", run_doc(tgs=5000.0)),  # 2.3 % slower: within 5 %
        "slow": write_run(tmp_path / "slow", run_doc(tgs=4600.0)),  # 10 % slower
    }


def test_flatten_names_every_figure() -> None:
    m = flatten(run_doc())
    large = [r["busbw_gbps"] for r in gpu_run_doc({})["comm"] if r["op"] == "all_reduce"
             and r["size_bytes"] >= 16 * 2**20]
    assert m["comm.all_reduce.busbw_gbps.large"] == pytest.approx(sum(large) / len(large))
    for name in ("comm.all_reduce.busbw_gbps.small", "comm.all_gather.busbw_gbps.medium",
                 "comm.all_reduce.busbw_gbps.avg", "comm.all_reduce.busbw_gbps@1048576", "comm.all_reduce.wrong",
                 "train.tgs", "train.mfu", "train.tflops_per_device", "train.alignment.mre",
                 "train.alignment.variance", "train.alignment.pass", "peaks.copy.gbps"):
        assert name in m, name
    assert m["peaks.matmul.bfloat16.tflops"] == 784.0  # the slowest of eight devices
    assert "train.padded_tgs" not in m  # null in run.json: no metric


def test_size_classes_and_directions() -> None:
    assert [size_class(n) for n in (65535, 65536, 16 * 2**20 - 1, 16 * 2**20)] == [
        "small", "medium", "medium", "large"]
    assert kind_of("comm.all_reduce.busbw_gbps@8").better == "higher"
    assert kind_of("train.alignment.mre").better == "lower"
    assert kind_of("comm.scatter.wrong").better == "lower"
    assert kind_of("train.alignment.variance").better is None


def test_compare_verdicts() -> None:
    a = flatten(run_doc())
    verdicts = {r.metric: r.verdict for r in compare(a, flatten(run_doc(tgs=4600.0, mre=0.007)))}
    assert verdicts["train.tgs"] == "FAIL"
    assert verdicts["train.alignment.mre"] == "PASS"  # 0.006 -> 0.007 is inside the noise floor
    assert verdicts["train.alignment.variance"] == "INFO"
    assert not any("@" in name for name in verdicts)
    misaligned = {r.metric: r.verdict for r in compare(a, flatten(run_doc(mre=0.025, verdict="FAIL")))}
    assert misaligned["train.alignment.mre"] == misaligned["train.alignment.pass"] == "FAIL"
    only_a = compare(a, {}, per_size=True)
    assert {r.verdict for r in only_a} == {"MISSING"} and any("@" in r.metric for r in only_a)
    assert lost(only_a) and not worse(only_a)  # the candidate lost metrics the reference judged: not a pass
    assert not lost(compare({}, a))  # new metrics in the candidate are no failure


def test_compare_exit_codes(runs: dict[str, Path]) -> None:
    ok = run_cli("compare", str(runs["a"]), str(runs["same"]))
    assert ok.returncode == 0, ok.stderr
    assert "# compare: PASS" in ok.stdout and "train.tgs" in ok.stdout
    bad = run_cli("compare", str(runs["a"]), str(runs["slow"]))
    assert bad.returncode == 1, bad.stderr
    assert "FAIL: 1 metrics worse by more than 5%: train.tgs" in bad.stdout
    assert run_cli("compare", str(runs["a"]), str(runs["slow"]), "--tolerance", "0.2").returncode == 0


RULES = """rules:
  - name: nvlink all_reduce
    metric: comm.all_reduce.busbw_gbps.large
    function: value
    criteria: ">= 2400"
    summary: about 300 GB/s busbw at large sizes
  - metric: ["re:train\\\\.(tgs|mfu)"]
    function: change
    criteria: ">= -0.05"
  - metric: "comm.*.wrong"
    criteria: "== 0"
"""


def test_rules_pass_and_fail(runs: dict[str, Path], tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    ok = run_cli("compare", str(runs["a"]), str(runs["same"]), "--rules", str(rules))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "# rules: PASS: 5 of 5 checks pass" in ok.stdout
    bad = run_cli("compare", str(runs["a"]), str(runs["slow"]), "--rules", str(rules))
    assert bad.returncode == 1
    assert [line.split()[-1] for line in bad.stdout.splitlines() if "train.tgs" in line] == ["FAIL"]
    value_only = tmp_path / "value.yaml"
    value_only.write_text("- metric: train.mfu\n  criteria: '>= 0.5'\n")
    assert run_cli("compare", str(runs["a"]), "--rules", str(value_only)).returncode == 1


def test_baseline_then_compare(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "baseline.json"
    made = run_cli("baseline", str(runs["a"]), str(runs["same"]), "-o", str(out))
    assert made.returncode == 0, made.stderr
    tgs = json.loads(out.read_text())["metrics"]["train.tgs"]
    assert tgs == {"mean": 5060.0, "min": 5000.0, "max": 5120.0, "count": 2}
    assert run_cli("compare", str(runs["same"]), "--baseline", str(out)).returncode == 0
    assert run_cli("compare", str(runs["slow"]), "--baseline", str(out)).returncode == 1


def _bad_inputs(tmp: Path, runs: dict[str, Path]) -> dict[str, tuple[list[str], str]]:
    half = tmp / "half"
    half.mkdir()
    (half / "run.json").write_text('{"schema_version": 1, "tool": "clusterbench", "comm": [')
    other = write_run(tmp / "other", {**run_doc(), "schema_version": SCHEMA_VERSION + 1})
    (tmp / "broken.yaml").write_text("rules:\n  - metric: train.tgs\n    criteria: [>= 1\n  - x: 1\n")
    (tmp / "nomatch.yaml").write_text("- name: typo\n  metric: train.tsg\n  criteria: '> 1'\n")
    (tmp / "change.yaml").write_text("- metric: train.tgs\n  function: change\n  criteria: '> 0'\n")
    (tmp / "criteria.yaml").write_text("- metric: train.tgs\n  criteria: 'at least 5'\n")
    a = str(runs["a"])
    return {
        "missing run": (["compare", a, str(tmp / "nope")], "no run found"),
        "half-written": (["compare", a, str(half)], "half-written"),
        "other schema": (["compare", str(other), a], f"schema version {SCHEMA_VERSION + 1}"),
        "bad yaml": (["compare", a, "--rules", str(tmp / "broken.yaml")], "line 3"),
        "no match": (["compare", a, "--rules", str(tmp / "nomatch.yaml")], "'typo': metric pattern train.tsg"),
        "change alone": (["compare", a, "--rules", str(tmp / "change.yaml")], "needs a baseline"),
        "bad criteria": (["compare", a, "--rules", str(tmp / "criteria.yaml")], "'at least 5'"),
        "nothing to compare": (["compare", a], "nothing to compare"),
        "bad baseline": (["compare", a, "--baseline", str(runs["a"] / "run.json")], "not a clusterbench baseline"),
        "baseline of half": (["baseline", a, str(half), "-o", str(tmp / "b.json")], "half-written"),
        "baseline unwritable": (["baseline", a, "-o", "/proc/clusterbench/b.json"], "cannot write"),
    }


def test_bad_input_is_one_line_exit_2(runs: dict[str, Path], tmp_path: Path) -> None:
    # Started together: each run pays the interpreter and torch start-up, not the test suite.
    cases = _bad_inputs(tmp_path, runs)
    for name, done in run_side_by_side({name: args for name, (args, _) in cases.items()}, at_once=len(cases)).items():
        assert done is not None, f"case {name!r} hung"
        try:
            assert_one_line_error(done, 2, cases[name][1])
        except AssertionError as e:
            raise AssertionError(f"case {name!r}: {e}") from None


def test_a_failed_run_or_a_lost_metric_fails_the_comparison_by_name(runs: dict[str, Path], tmp_path: Path) -> None:
    failed = write_run(tmp_path / "failed", {**run_doc(), "status": "failed", "error": "rank 1 died (SIGKILL)"})
    proc = run_cli("compare", str(runs["a"]), str(failed))
    assert proc.returncode == 1, proc.stderr
    assert "run B is failed (rank 1 died (SIGKILL))" in proc.stdout.splitlines()[-1]
    assert run_cli("compare", str(failed), "--rules", str(_value_rule(tmp_path))).returncode == 1
    no_train = write_run(tmp_path / "notrain", {**run_doc(), "train": None})
    proc = run_cli("compare", str(runs["a"]), str(no_train))
    assert proc.returncode == 1, proc.stderr
    verdict = proc.stdout.splitlines()[-1]
    assert "judged metrics missing in the run judged: train." in verdict and "worse" not in verdict


def _value_rule(tmp: Path) -> Path:
    rules = tmp / "tgs.yaml"
    rules.write_text("- metric: train.tgs\n  criteria: '> 0'\n")
    return rules
