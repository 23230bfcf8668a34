"""`clusterbench run`: every stage into one run folder, the verdicts by rules, the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import GPT2, assert_one_line_error, read_run, run_cli
from report_fixtures import as_run, gpu_run_doc

from clusterbench.analyse.verdicts import overall
from clusterbench.cli import build_parser
from clusterbench.collectives import ALL_OPS
from clusterbench.commands import run as run_command
from clusterbench.hw.render import PEAK_HEADER
from clusterbench.shape import JobShape
from clusterbench.stages.registry import judge


def test_quick_run_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("run", "--quick", "--peak-seconds", "0.1", "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = read_run(out)
    assert doc["status"] == "complete" and doc["verdict"] == "PASS"
    assert doc["hardware"]["gpus"] == [] and doc["peaks"]["matmul"][0]["tflops"] > 0
    assert {r["op"] for r in doc["comm"]} == {"all_reduce", "all_gather"}
    assert len(doc["train"]["losses"]) == 100 and doc["train"]["alignment"]["verdict"] == "PASS"
    assert doc["canary"] is None  # the train stage already is the canary's task on a CPU
    checks = {c["check"]: c["status"] for c in doc["verdicts"]}
    # A CPU has no link table: the bandwidth check says it was not judged, rather than pass.
    assert checks == {"comm correctness": "PASS", "comm bandwidth": "SKIP", "training": "PASS",
                      "MFU": "PASS", "slow rank": "PASS", "loss alignment": "PASS"}
    assert (out / "report.html").stat().st_size > 10_000
    assert (out / "comm.csv").exists() and (out / "train_steps.csv").exists()
    assert "report: " in proc.stdout and "PASS: fit to train" in proc.stdout
    assert proc.stdout.count(PEAK_HEADER) == 1  # one peak table, printed by rank 0


def test_skip_and_stage_options_reach_the_stages(tmp_path: Path) -> None:
    """A perturbed task (another seed) is refused by the shipped reference's task check,
    so the run judges nothing and says so with a WARN; the numerics canary, the shipped task
    on this hardware, runs before it and is judged."""
    out = tmp_path / "run"
    proc = run_cli("run", "--skip", "comm", "--peak-seconds", "0.1", "--train-args", "--steps 12 --seed 3",
                   "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = read_run(out)
    assert doc["comm"] == [] and len(doc["train"]["losses"]) == 12
    checks = {c["check"]: c for c in doc["verdicts"]}
    assert checks["loss alignment"]["status"] == "WARN" and doc["verdict"] == "WARN"
    assert "step count 100, this run has 12" in checks["loss alignment"]["detail"]
    assert checks["comm correctness"] == {"check": "comm correctness", "status": "SKIP",
                                          "detail": "not judged: the comm stage did not run"}
    canary = doc["canary"]
    assert len(canary["losses"]) == 100 and canary["config"]["dtype"] == "float32"
    assert canary["alignment"]["verdict"] == "PASS" and canary["alignment"]["reference"] == "tiny-cpu-float32"
    assert checks["numerics canary"]["status"] == "PASS" and "== [3/4] canary" in proc.stdout
    assert 'id="canary"' in (out / "report.html").read_text()
    assert len((out / "train_steps.csv").read_text().splitlines()) == 13  # the train stage's steps only


def test_nothing_judged_is_no_verdict(tmp_path: Path) -> None:
    """With both judged stages left out, run says so and exits 2, instead of PASS over zero checks."""
    out = tmp_path / "run"
    proc = run_cli("run", "--skip", "comm", "--skip", "train", "--peak-seconds", "0.1", "--out", str(out))
    assert_one_line_error(proc, 2, "nothing judged")
    assert "fit to train" not in proc.stdout
    doc = read_run(out)
    assert {c["status"] for c in doc["verdicts"]} == {"SKIP"} and doc["verdict"] is None
    assert doc["status"] == "complete" and doc["peaks"]["matmul"] and (out / "report.html").exists()


def test_a_corrupted_collective_fails_the_verdict_but_training_still_runs(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("run", "--quick", "--skip", "canary", "--peak-seconds", "0.1", "--train-args",
                   "--steps 8 --warmup-steps 2", "--out", str(out), env={"CLUSTERBENCH_TEST_CORRUPT": "all_reduce:0"},
                   timeout=300)
    assert proc.returncode == 1
    doc = read_run(out)
    checks = {c["check"]: c["status"] for c in doc["verdicts"]}
    assert checks["comm correctness"] == "FAIL" and checks["training"] == "PASS"
    assert doc["verdict"] == "FAIL" and (out / "report.html").exists()


def test_a_model_without_a_flops_formula_gets_verdicts_and_a_report(tmp_path: Path) -> None:
    """A GPT-2 config trains and is judged: MFU is "not judged", never a traceback."""
    config = tmp_path / "gpt2.json"
    config.write_text(json.dumps(GPT2))
    out = tmp_path / "run"
    proc = run_cli("run", "--skip", "comm", "--skip", "canary", "--peak-seconds", "0.1", "--train-args",
                   f"--model-config {config} --steps 4 --warmup-steps 1 --seq-len 32 --global-batch 4",
                   "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    checks = {c["check"]: c for c in read_run(out)["verdicts"]}
    assert checks["training"]["status"] == "PASS" and "TFLOPS" not in checks["training"]["detail"]
    assert checks["MFU"] == {"check": "MFU", "status": "SKIP",
                             "detail": "not judged: no FLOPs formula for this model (Llama-style configs only)"}
    again = run_cli("report", str(out))
    assert again.returncode == 0, again.stderr
    assert "no FLOPs formula for this model" in (out / "report.html").read_text()


def test_rules_file_replaces_the_default_checks(tmp_path: Path) -> None:
    rules = tmp_path / "strict.yaml"
    rules.write_text("rules:\n"
                     "  - name: MFU at least 99%\n    metric: train.mfu\n    criteria: '>= 0.99'\n"
                     "  - name: tgs\n    metric: train.tgs\n    criteria: '> 0'\n    level: WARN\n"
                     "  - name: typo\n    metric: train.tsg\n    criteria: '> 0'\n")
    out = tmp_path / "run"
    proc = run_cli("run", "--skip", "comm", "--skip", "canary", "--peak-seconds", "0.1", "--train-args",
                   "--steps 6 --warmup-steps 2", "--rules", str(rules), "--out", str(out), timeout=300)
    assert proc.returncode == 1, proc.stderr
    doc = read_run(out)
    assert [(c["check"], c["status"]) for c in doc["verdicts"]] == [
        ("MFU at least 99%", "FAIL"), ("tgs", "PASS"), ("typo", "FAIL")]
    assert "rule: train.mfu >= 0.99" in doc["verdicts"][0]["detail"] and doc["verdict"] == "FAIL"
    # A pattern that matches nothing fails visibly after the run, instead of losing its conclusion.
    assert "this run has no train.tsg" in doc["verdicts"][2]["detail"] and (out / "report.html").exists()


@pytest.mark.parametrize("args, needle", [
    (["--comm-args", "--ops bogus"], "unknown op 'bogus'"),
    (["--train-args", "--preset nope"], "nope"),
    (["--train-args", "--frobnicate"], "--train-args"),
    (["--train-args", "--seq-len 0"], "--seq-len: must be at least 1"),
    (["--comm-args", "--nproc 4"], "--comm-args"),
    (["--skip", "everything"], "invalid choice"),
    (["--expect-busbw", "nan"], "--expect-busbw"),
    (["--rules", "/nonexistent/rules.yaml"], "cannot read rules file"),
    (["--rules", "{change}"], "needs a baseline"),
])
def test_bad_options_are_one_line_exit_2(args: list[str], needle: str, tmp_path: Path) -> None:
    change = tmp_path / "change.yaml"
    change.write_text("- metric: train.tgs\n  function: change\n  criteria: '> 0'\n")
    args = [a.format(change=change) for a in args]
    assert_one_line_error(run_cli("run", *args, "--out", str(tmp_path / "run")), 2, needle)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args, needle", [
    (["--device", "cuda"], "no CUDA GPU"),
    (["--device", "foo"], "unknown device"),
    (["--size", "-5"], "--size"),
    (["--seconds", "nan"], "--seconds"),
])
def test_peak_refuses_bad_input_before_writing(args: list[str], needle: str, tmp_path: Path) -> None:
    assert_one_line_error(run_cli("peak", *args, "--out", str(tmp_path / "run")), 2, needle)
    assert not (tmp_path / "run").exists()


def _comm_plan(*words: str, device: str = "cuda"):
    """The comm stage's plan as `run` resolves it for a 2-rank job on `device`."""
    args = build_parser().parse_args(["run", "--skip", "train", *words])
    plan = run_command.prepare(args, JobShape(2, device, "nccl" if device == "cuda" else "gloo", 2))
    return next(p for stage, p in plan.stages if stage.name == "comm")


def test_run_defaults_are_typed_values_not_user_input() -> None:
    """On a GPU, run leaves --max-bytes unset, so the sweep keeps its cap at the devices' free memory;
    whichever way the user gives a stage's option, it lies over run's defaults."""
    gpu = _comm_plan()
    assert gpu.options.max_bytes is None and gpu.fit_memory and gpu.timing == "loop"
    assert gpu.ops == ALL_OPS
    assert not _comm_plan("--comm.max-bytes", "64M").fit_memory  # what the user typed is obeyed
    for words in (["--comm.ops", "pt2pt"], ["--comm-args", "--ops pt2pt"]):
        cpu = _comm_plan(*words, device="cpu")
        assert cpu.ops == ("pt2pt",) and cpu.options.max_bytes == 16 * 2**20 and cpu.timing == "stamps"


def _run(busbw_gbs: float, gpus: list, device_type: str = "cuda", expected: dict | None = None):
    doc = gpu_run_doc({"hostname": "a", "gpus": gpus}, verdicts=[], expected=expected or {},
                      env={"hostname": "a", "device_type": device_type, "hosts": ["a"]})
    for row in doc["comm"]:
        row["busbw_gbps"] = busbw_gbs * 8
    return as_run(doc)


def _status(run, check: str) -> str | None:
    return next((v.status for v in judge(run) if v.check == check), None)


H100 = {"index": 0, "nvlink_gbps": 450.0, "nvlink_version": 4, "nvlink_active": 18, "pcie": {"gbps": 63.0}}


def test_bandwidth_verdict_against_the_link_and_an_expected_figure() -> None:
    assert _status(_run(360, [H100] * 8), "comm bandwidth") == "PASS"  # 80% of 450: the usual ceiling
    assert _status(_run(100, [H100] * 8), "comm bandwidth") == "WARN"
    assert overall(judge(_run(480, [H100] * 8))) == "PASS"  # in-switch reduction beats the line: no error
    given = {"value": 420 * 8, "origin": "given", "system": "this cluster", "source": "--expect-busbw"}
    expected = _run(360, [H100] * 8, expected={"comm.all_reduce.busbw_gbps.top": given})  # 360 < 0.9 x 420
    assert _status(expected, "comm bandwidth expected") == "FAIL" and overall(judge(expected)) == "FAIL"
    assert _status(_run(360, [H100] * 8), "comm bandwidth expected") is None  # nothing expected: no line
    assert _status(_run(360, [], device_type="cpu"), "comm bandwidth") == "SKIP"


def test_a_downtrained_pcie_link_under_load_is_a_warning() -> None:
    loaded = {**H100, "pcie": {"gbps": 63.0, "under_load": True, "downtrained": False}}
    slow = {**H100, "pcie": {"gbps": 63.0, "under_load": True, "downtrained": True}}
    assert _status(_run(360, [loaded, slow]), "PCIe links") == "WARN"
    assert _status(_run(360, [loaded, loaded]), "PCIe links") == "PASS"
    idle = {**H100, "pcie": {"gbps": 63.0, "under_load": False, "downtrained": True}}
    assert _status(_run(360, [idle, idle]), "PCIe links") is None  # idle links park: not judged
