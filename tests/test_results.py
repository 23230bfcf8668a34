"""run.json and the other documents: one typed schema, checked where it is read, written strictly."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import assert_one_line_error, read_run, run_cli
from report_fixtures import as_run, doc_of, gpu_run_doc, write_run

from clusterbench.results import documents
from clusterbench.results.run import RUN_KIND, SCHEMA_VERSION
from clusterbench.stages.burnin.records import BURNIN
from clusterbench.stages.comm.records import COMM, COMM_OPTIONS, COST_MODEL
from clusterbench.stages.hardware.records import HARDWARE
from clusterbench.stages.registry import load_run
from clusterbench.stages.train.records import TRAIN

V1_RUN = Path(__file__).parent / "data" / "v1-run"  # `clusterbench run --quick` of clusterbench 0.1.0
# `clusterbench comm --nproc 2 --ops all_reduce -b 1K -e 16K --telemetry-hz 0`, then `model fit --save`, with
# the clusterbench of schema version 3 (commit 49468aa): its alpha-beta model in the section then called `model`.
V3_RUN = Path(__file__).parent / "data" / "v3-comm-run"


def test_a_version_1_run_folder_still_loads_renders_and_compares(tmp_path: Path) -> None:
    run = tmp_path / "old"
    shutil.copytree(V1_RUN, run)
    old = load_run(run)
    assert old.schema_version == SCHEMA_VERSION and old.command == "run" and len(COMM.of(old)) == 20
    assert TRAIN.of(old) is not None and TRAIN.of(old).config.preset == "tiny" and len(TRAIN.of(old).losses) == 12
    sweep = COMM_OPTIONS.of(old)
    assert (sweep.min_bytes, sweep.max_bytes, sweep.step_factor) == (8, 2**20, 4.0)
    assert COMM_OPTIONS.of(old).rotate is False  # its sweep held its buffers still
    proc = run_cli("report", str(run))
    assert proc.returncode == 0, proc.stderr
    html = (run / "report.html").read_text()
    assert "Fine-tuning" in html and "comm correctness" in html
    compared = run_cli("compare", str(run), str(run))
    assert compared.returncode == 0, compared.stderr


def test_a_version_3_model_section_reads_as_the_cost_model(tmp_path: Path) -> None:
    run = tmp_path / "old"
    shutil.copytree(V3_RUN, run)
    old = load_run(run)
    assert old.schema_version == SCHEMA_VERSION and COST_MODEL.of(old) is not None
    assert COST_MODEL.of(old).fits[0].op == "all_reduce" and COST_MODEL.of(old).validation
    assert COMM_OPTIONS.of(old).rotate is False
    proc = run_cli("report", str(run))
    assert proc.returncode == 0, proc.stderr
    assert '<section id="model"' in (run / "report.html").read_text()
    assert "all_reduce" in run_cli("model", "predict", "--from", str(run), "--nodes", "2", "--inter", "ndr").stdout


def test_a_version_7_run_reads_its_sections_kept_under_extra(tmp_path: Path) -> None:
    """Version 7 kept the sections its schema did not name under `extra`: the burn-in's, and a team's own
    stage's, which a clusterbench without that stage leaves out (reading never writes the folder back)."""
    doc = gpu_run_doc({})
    doc.pop("burnin", None)
    doc.update(schema_version=7, extra={"burnin": {"duration_s": 6.0, "window_s": 0.5}, "toy": {"greeting": "hi"}})
    folder = write_run(tmp_path / "v7", doc)
    before = (folder / "run.json").read_bytes()
    old = load_run(folder)
    assert old.schema_version == SCHEMA_VERSION and BURNIN.of(old).duration_s == 6.0
    assert "toy" not in old.sections and len(COMM.of(old)) == len(doc["comm"])
    assert run_cli("compare", str(folder), str(folder)).returncode == 0
    assert (folder / "run.json").read_bytes() == before
    doc["extra"]["comm"] = []
    assert_one_line_error(run_cli("compare", str(write_run(tmp_path / "both", doc)), str(folder)), 2,
                          "field extra.comm: also a key of its own")


def test_a_negative_count_of_rows_kept_in_their_csv_is_refused(tmp_path: Path) -> None:
    folder = write_run(tmp_path / "run", {**gpu_run_doc({}), "pair_rows": -3})
    assert_one_line_error(run_cli("report", str(folder)), 2, "field pair_rows: must be at least 0, got -3")


def test_version_1_gpus_get_their_pcie_fields_grouped() -> None:
    flat = {"index": 0, "name": "NVIDIA H100", "pcie_gen_current": 4, "pcie_gen_max": 5, "pcie_gbps": 63.0,
            "pcie_downtrained": True, "pcie_under_load": True, "pcie_note": None}
    doc = {"schema_version": 1, "tool": "clusterbench", "hardware": {"hostname": "a", "gpus": [flat]},
           "comm_options": {"sizes": [8, 1024], "fit_device_memory": False, "unit": "GBps"}}
    run = as_run(doc)
    gpu = HARDWARE.of(run).gpus[0]
    assert (gpu.pcie.gen_current, gpu.pcie.gen_max, gpu.pcie.downtrained, gpu.pcie.under_load) == (4, 5, True, True)
    sweep = COMM_OPTIONS.of(run)
    assert (sweep.min_bytes, sweep.max_bytes, sweep.unit) == (8, 1024, "GBps")


def test_a_run_round_trips_through_json() -> None:
    run = as_run(gpu_run_doc({"hostname": "gpu-node-01", "gpus": []}))
    text = documents.text_of(doc_of(run))
    assert as_run(json.loads(text)) == run


@pytest.mark.parametrize("change, needle", [
    (lambda d: d["train"].update(losses=["low", 2.0]), "field train.losses[0]: expected a number, got 'low'"),
    (lambda d: d["comm"][3].pop("busbw_gbps"), "field comm[3].busbw_gbps: missing"),
    (lambda d: d["comm"][0].update(wrong=-1), "field comm[0].wrong: must be at least 0"),
    (lambda d: d.update(status="finished"), "field status: expected one of"),
    (lambda d: d["comm"][0].update(fast=True), "field comm[0].fast: unknown field"),
    (lambda d: d["train"]["summary"].update(tgs=True), "field train.summary.tgs: expected a number, got True"),
    (lambda d: d.update(schema_version=SCHEMA_VERSION + 1), "upgrade clusterbench"),
    (lambda d: d.update(kind="clusterbench-baseline"), "a clusterbench-baseline, not a clusterbench run.json"),
])
def test_a_document_with_wrong_contents_is_one_line_naming_the_field(change, needle: str, tmp_path: Path) -> None:
    doc = gpu_run_doc({})
    change(doc)
    run = write_run(tmp_path / "run", doc)
    for command in (["report", str(run)], ["compare", str(run), str(run)]):
        assert_one_line_error(run_cli(*command), 2, needle)


def test_a_reference_with_a_negative_noise_band_is_refused(tmp_path: Path) -> None:
    shipped = Path(__file__).parents[1] / "src" / "clusterbench" / "references" / "tiny-cpu-float32.json"
    ref = json.loads(shipped.read_text())
    ref["noise_band"] = -0.5
    bad = tmp_path / "ref.json"
    bad.write_text(json.dumps(ref))
    proc = run_cli("align", str(V1_RUN), "--reference", str(bad))
    assert_one_line_error(proc, 2, "field noise_band: must be at least 0, got -0.5")


def test_run_folder_files_get_the_umask_mode_and_strict_json(tmp_path: Path) -> None:
    """0644 under umask 022, so a report copied to a web server can be read; no NaN tokens."""
    out = tmp_path / "run"

    def cli(*args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "clusterbench", *args], capture_output=True, text=True,
                              timeout=180, check=False, env={**os.environ, **env}, preexec_fn=lambda: os.umask(0o022))

    trained = cli("train", "--steps", "5", "--warmup-steps", "1", "--seq-len", "32", "--global-batch", "4",
                  "--peak-tflops", "1", "--out", str(out), CLUSTERBENCH_TEST_NAN_STEP="3")
    assert trained.returncode == 1, trained.stderr  # the NaN fails the run
    assert cli("report", str(out)).returncode == 0
    files = sorted(out.iterdir())
    assert {f.name for f in files} == {"run.json", "train_steps.csv", "telemetry.csv", "report.html"}
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o644 for f in files), [oct(f.stat().st_mode) for f in files]
    text = (out / "run.json").read_text()
    json.loads(text, parse_constant=lambda token: pytest.fail(f"non-strict JSON token {token}"))
    assert read_run(out)["train"]["losses"][2] is None and read_run(out)["kind"] == RUN_KIND


def test_a_report_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    run = tmp_path / "old"
    shutil.copytree(V1_RUN, run)
    (run / "report.html").mkdir()  # something in the way of the file
    assert_one_line_error(run_cli("report", str(run)), 2, "report: cannot write")
