"""`clusterbench run`: every stage into one run folder, the verdicts, the report."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_one_line_error, read_run, run_cli

from clusterbench.suite.verdicts import judge, overall


def test_quick_run_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("run", "--quick", "--peak-seconds", "0.1", "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = read_run(out)
    assert doc["status"] == "complete" and doc["verdict"] == "PASS"
    assert doc["hardware"]["gpus"] == [] and doc["peaks"]["matmul"][0]["tflops"] > 0
    assert {r["op"] for r in doc["comm"]} == {"all_reduce", "all_gather"}
    assert len(doc["train"]["losses"]) == 100 and doc["train"]["alignment"]["verdict"] == "PASS"
    checks = {c["check"]: c["status"] for c in doc["verdicts"]}
    assert checks == {"comm correctness": "PASS", "comm bandwidth": "PASS", "training": "PASS",
                      "MFU": "PASS", "loss alignment": "PASS"}
    assert (out / "report.html").stat().st_size > 10_000
    assert (out / "comm.csv").exists() and (out / "train_steps.csv").exists()
    assert "report: " in proc.stdout and "PASS: fit to train" in proc.stdout


def test_skip_and_stage_options_reach_the_sub_commands(tmp_path: Path) -> None:
    """A perturbed task (another seed) is refused by the shipped reference's task check,
    so the run judges nothing and says so with a WARN."""
    out = tmp_path / "run"
    proc = run_cli("run", "--skip", "comm", "--peak-seconds", "0.1", "--train-args", "--steps 12 --seed 3",
                   "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = read_run(out)
    assert "comm" not in doc and len(doc["train"]["losses"]) == 12
    checks = {c["check"]: c["status"] for c in doc["verdicts"]}
    assert checks["loss alignment"] == "WARN" and doc["verdict"] == "WARN"


def test_a_corrupted_collective_fails_the_verdict_but_training_still_runs(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("run", "--quick", "--peak-seconds", "0.1", "--train-args", "--steps 8 --warmup-steps 2",
                   "--out", str(out), env={"CLUSTERBENCH_TEST_CORRUPT": "all_reduce:0"}, timeout=300)
    assert proc.returncode == 1
    doc = read_run(out)
    checks = {c["check"]: c["status"] for c in doc["verdicts"]}
    assert checks["comm correctness"] == "FAIL" and checks["training"] == "PASS"
    assert doc["verdict"] == "FAIL" and (out / "report.html").exists()


@pytest.mark.parametrize("args, needle", [
    (["--comm-args", "--ops bogus"], "unknown op 'bogus'"),
    (["--train-args", "--preset nope"], "nope"),
    (["--train-args", "--frobnicate"], "--train-args"),
    (["--skip", "everything"], "invalid choice"),
])
def test_bad_stage_options_are_one_line_exit_2(args: list[str], needle: str, tmp_path: Path) -> None:
    assert_one_line_error(run_cli("run", *args, "--out", str(tmp_path / "run")), 2, needle)


@pytest.mark.parametrize("args, needle", [
    (["--device", "cuda"], "no CUDA GPU"),
    (["--device", "foo"], "unknown device"),
    (["--size", "-5"], "--size"),
    (["--seconds", "nan"], "--seconds"),
])
def test_peak_refuses_bad_input_before_writing(args: list[str], needle: str, tmp_path: Path) -> None:
    assert_one_line_error(run_cli("peak", *args, "--out", str(tmp_path / "run")), 2, needle)
    assert not (tmp_path / "run").exists()


def _doc(busbw_gbps: float, gpus: list, device_type: str = "cuda") -> dict:
    rows = [{"op": "all_reduce", "size_bytes": s, "world_size": 8, "busbw_gbps": busbw_gbps, "wrong": 0}
            for s in (2**20, 2**30)]
    return {"status": "complete", "comm": rows, "env": {"device_type": device_type, "hosts": ["a"]},
            "hardware": {"gpus": gpus}}


H100 = {"index": 0, "nvlink_gbps": 450.0, "nvlink_version": 4, "nvlink_active": 18, "pcie_gbps": 63.0}


def test_bandwidth_verdict_against_the_link_and_an_expected_figure() -> None:
    good = judge(_doc(360 * 8, [H100] * 8))  # 360 GB/s of 450: the usual ceiling without NVLS
    assert [c["status"] for c in good if c["check"] == "comm bandwidth"] == ["PASS"]
    slow = judge(_doc(100 * 8, [H100] * 8))
    assert [c["status"] for c in slow if c["check"] == "comm bandwidth"] == ["WARN"]
    nvls = judge(_doc(480 * 8, [H100] * 8))  # in-switch reduction beats the line: not an error
    assert overall(nvls) == "PASS"
    expected = judge(_doc(360 * 8, [H100] * 8), expect_busbw_gbs=420)  # 360 < 0.9 x 420
    assert [c["status"] for c in expected if c["check"] == "comm bandwidth"] == ["FAIL"]
    assert overall(expected) == "FAIL"


def test_a_downtrained_pcie_link_under_load_is_a_warning() -> None:
    loaded = {**H100, "pcie_under_load": True, "pcie_downtrained": False}
    slow = {**loaded, "pcie_downtrained": True}
    assert overall(judge(_doc(360 * 8, [loaded, slow]))) == "WARN"
    assert overall(judge(_doc(360 * 8, [loaded, loaded]))) == "PASS"
    idle = {**H100, "pcie_downtrained": True, "pcie_under_load": False}  # idle links park: not judged
    checks = judge(_doc(360 * 8, [idle, idle]))
    assert overall(checks) == "PASS" and "not judged" in checks[0]["detail"]
