"""Expected figures: the shipped table matched by the hardware picture, a team's own files, the verdicts
and the report section that show them (docs/methodology.md §11)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from report_fixtures import as_run, gpu_run_doc

from clusterbench.analyse import expected
from clusterbench.errors import UsageError
from clusterbench.hw import affinity
from clusterbench.results.run import Expected
from clusterbench.stages.peaks.records import PEAKS
from clusterbench.stages.registry import judge, load_run, metrics_of, page, run_folder

DGX_H100 = json.loads((Path(__file__).parent / "data" / "hardware" / "dgx-h100.json").read_text())
ONE_NODE = [{"rank": r, "node": "dgx-h100-01", "local_rank": r, "device": f"cuda:{r}"} for r in range(8)]


def _run(all_reduce_gbs: float = 470.0, nvls: int | None = 1, hardware: dict | None = None,
         ranks: list | None = None, **overrides):
    doc = gpu_run_doc(hardware or DGX_H100, verdicts=[], **overrides)
    doc["env"]["ranks"] = ONE_NODE if ranks is None else ranks
    for row in doc["comm"]:
        if row["op"] == "all_reduce":
            row["busbw_gbps"] = all_reduce_gbs * 8 * row["size_bytes"] / (row["size_bytes"] + 8 * 2**20)
    if nvls is not None:
        doc["nccl"] = {"nvls_channels": 16 * nvls}
    return as_run(doc)


def _matched(run, tables=None):
    expected.attach(run, metrics_of(run), tables or [expected.load(expected.shipped_path(), "shipped")], {})
    return run


def _verdict(run, check: str):
    return next((v for v in judge(run) if v.check == check), None)


def test_every_shipped_figure_has_a_source_and_loads() -> None:
    systems = expected.load(expected.shipped_path(), "shipped")
    assert len(systems) >= 5
    for system in systems:
        for figure in system.figures:
            assert figure.expected.source and figure.expected.value > 0 and figure.expected.origin == "shipped"


def test_a_dgx_h100_picture_matches_and_nvls_picks_the_figure() -> None:
    want = {"gpu": "H100 SXM", "gpus": 8, "nvswitch": True, "nodes": 1, "ranks_per_node": 8, "nic": "IB NDR",
            "nccl.nvls": 1}
    assert expected.facts(_run()).items() >= want.items()
    run = _matched(_run(nvls=1))
    assert run.expected["comm.all_reduce.busbw_gbps.top"].value == 480 * 8
    assert run.expected["peaks.matmul.bfloat16.tflops"].value == 794.5
    ring = _matched(_run(nvls=0))
    assert ring.expected["comm.all_reduce.busbw_gbps.top"].value == 367 * 8
    assert ring.expected_note is None


def test_what_the_run_cannot_tell_is_said_not_guessed() -> None:
    run = _matched(_run(nvls=None))  # no NCCL log: NVLS or Ring is unknown
    assert "comm.all_reduce.busbw_gbps.top" not in run.expected
    assert "peaks.matmul.bfloat16.tflops" in run.expected
    assert "cannot tell nccl.nvls" in run.expected_note


@pytest.mark.parametrize("case", ["four ranks", "cpu", "unknown gpu"])
def test_other_systems_match_nothing(case: str) -> None:
    if case == "four ranks":  # 4 of the 8 GPUs: the 8-GPU figures do not apply
        run = _run(ranks=ONE_NODE[:4])
    elif case == "cpu":
        run = _run(hardware={"hostname": "a"}, ranks=[], env={"hostname": "a", "device_type": "cpu", "hosts": ["a"]})
    else:
        gpus = [{**g, "name": "NVIDIA Made-Up 9000"} for g in DGX_H100["gpus"]]
        run = _run(hardware={**DGX_H100, "gpus": gpus, "rdma": []})
    run = _matched(run)
    if case == "four ranks":  # a GPU's matmul peak does not depend on how many ran
        assert list(run.expected) == ["peaks.matmul.bfloat16.tflops"]
        return
    assert run.expected == {}
    assert run.expected_note.startswith("no system in the table matches this run")
    html = page(run)
    assert "no guess is made" in html and "--expected FILE" in html


def test_below_the_published_figure_is_a_warning_naming_the_source() -> None:
    good = _matched(_run(470))
    assert _verdict(good, "expected figures").status == "PASS"
    slow = _matched(_run(400))
    v = _verdict(slow, "expected figures")
    assert v.status == "WARN"
    top = metrics_of(slow).values["comm.all_reduce.busbw_gbps.top"] / 8  # GB/s at the largest sizes
    assert f"{top / 480:.0%} of what systems like this measure (8 x H100 SXM" in v.detail
    assert "dgxc-benchmarking" in v.detail
    assert _verdict(slow, "comm bandwidth expected") is None  # only --expect-busbw FAILs


def test_the_report_puts_each_figure_beside_its_expectation_and_its_link() -> None:
    run = _matched(_run(400))
    html = page(run)
    assert 'id="expected"' in html and "dgxc-benchmarking" in html
    row = html[html.index("<code>comm.all_reduce.busbw_gbps.top</code>"):]
    row = row[:row.index("</tr>")]
    top = metrics_of(run).values["comm.all_reduce.busbw_gbps.top"] / 8
    assert "480 GB/s" in row  # in the unit the run printed (GBps)
    assert f"{top / 480 * 100:.0f} %" in row  # of what systems like this measure
    assert f"{top / 450 * 100:.0f} %" in row  # of NVLink 4's 450 GB/s line


def test_a_team_file_wins_and_a_baseline_is_accepted(tmp_path: Path) -> None:
    table = {"kind": "clusterbench-expected", "schema_version": 1, "systems": [{
        "system": "our pod A", "match": {"gpu": "H100 SXM", "nodes": 1},
        "figures": [{"metric": "comm.all_reduce.busbw_gbps.top", "value": 390, "unit": "GB/s",
                     "source": "pod A acceptance, 2026-10"}]}]}
    mine = tmp_path / "fleet.yaml"
    mine.write_text(yaml.safe_dump(table))
    run = _matched(_run(400), expected.tables([mine]))
    e = run.expected["comm.all_reduce.busbw_gbps.top"]
    assert (e.value, e.origin, e.system) == (390 * 8, "file", "our pod A")
    assert _verdict(run, "fleet figures").status == "PASS"
    assert _verdict(run, "expected figures") is None  # the team's figure took the published one's place
    baseline = tmp_path / "baseline.json"
    subprocess.run([sys.executable, "-m", "clusterbench", "baseline", str(_saved(tmp_path, _run(480))), "-o",
                    str(baseline)], check=True, capture_output=True)
    run = _matched(_run(400), expected.tables([baseline]))
    e = run.expected["comm.all_reduce.busbw_gbps.top"]
    assert e.origin == "file" and e.system.startswith("baseline of 1 run")
    assert "comm.wrong" not in run.expected  # fewer is better: no share of it means anything
    assert _verdict(run, "fleet figures").status == "WARN"


def _saved(tmp_path: Path, run) -> Path:
    folder = tmp_path / "earlier"
    folder.mkdir()
    run_folder(folder).save(run)
    return folder


@pytest.mark.parametrize(("text", "message"), [
    ("{kind: other}", "not a table of expected figures"),
    ("kind: clusterbench-expected\nsystems: [{figures: [{metric: a, value: 1}]}]", "'source' is required"),
    ("kind: clusterbench-expected\nsystems: [{match: {colour: red}, figures: []}]", "unknown fact(s) colour"),
    ("kind: clusterbench-expected\nsystems: [{figures: [{metric: a, value: -1, source: s}]}]", "positive number"),
    ("kind: clusterbench-expected\nsystems: [{figures: [{metric: a, value: 1, unit: furlongs, source: s}]}]",
     "unit 'furlongs'"),
    ("[unclosed", "does not parse"),
])
def test_a_bad_table_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(UsageError, match=None) as e:
        expected.load(bad)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_run_refuses_a_bad_table_before_any_rank_starts(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    done = subprocess.run([sys.executable, "-m", "clusterbench", "run", "--expected", str(missing), "--out",
                           str(tmp_path / "r")], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--expected" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "r" / "run.json").exists()


def test_a_version_2_folder_keeps_its_given_figure(tmp_path: Path) -> None:
    doc = gpu_run_doc(DGX_H100, schema_version=2, expected={"comm.all_reduce.busbw_gbps.top": 3000.0})
    (tmp_path / "run.json").write_text(json.dumps(doc))
    run = load_run(tmp_path)
    assert run.expected == {"comm.all_reduce.busbw_gbps.top": Expected(3000.0, "given", "this cluster",
                                                                       "--expect-busbw")}
    assert metrics_of(run).values["comm.all_reduce.busbw_gbps.top"] > 0


def test_the_comm_section_states_each_op_against_its_expected_figure() -> None:
    run = _matched(_run(400))
    top = metrics_of(run).values["comm.all_reduce.busbw_gbps.top"] / 8
    comm = page(run)
    comm = comm[comm.index('<section id="comm"'):]
    assert f"= {top / 480 * 100:.0f} % of what systems like this measure (8 x H100 SXM" in comm


def test_a_comm_run_on_this_machine_says_nothing_matches_and_records_placement(tmp_path: Path) -> None:
    out = tmp_path / "comm"
    done = subprocess.run([sys.executable, "-m", "clusterbench", "comm", "-e", "4K", "--out", str(out)],
                          check=False, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "# expected figures: no system in the table matches this run (device cpu" in done.stdout
    doc = json.loads((out / "run.json").read_text())
    assert doc["expected"] == {} and doc["expected_note"].startswith("no system in the table matches")
    mine = affinity.cpulist(os.sched_getaffinity(0))
    assert [(p["cpus"], p["device_numa"]) for p in doc["env"]["ranks"]] == [(mine, None)] * 2


def test_a_slow_matmul_peak_is_a_warning_against_the_published_maximum() -> None:
    assert _verdict(_matched(_run()), "expected peaks").status == "PASS"  # 784 of 794.5 TFLOP/s
    slow = _run()
    PEAKS.of(slow).matmul[:] = [replace(p, tflops=600.0) if p.dtype == "bfloat16" else p for p in PEAKS.of(slow).matmul]
    v = _verdict(_matched(slow), "expected peaks")
    assert v.status == "WARN" and "76% of what systems like this measure (H100 SXM" in v.detail


def test_the_copy_peak_is_kept_in_bytes_and_compared_as_such(tmp_path: Path) -> None:
    run = _run()
    measured = metrics_of(run).values["peaks.copy.gbps"]  # GB/s: read and write both counted
    table = {"kind": "clusterbench-expected", "systems": [{"figures": [
        {"metric": "peaks.copy.gbps", "value": measured, "unit": "GB/s", "source": "our acceptance"},
        {"metric": "comm.all_gather.busbw_gbps.top", "value": 2920, "unit": "Gbps", "source": "our acceptance"}]}]}
    mine = tmp_path / "fleet.yaml"
    mine.write_text(yaml.safe_dump(table))
    run = _matched(run, expected.tables([mine]))
    assert run.expected["peaks.copy.gbps"].value == measured
    assert run.expected["comm.all_gather.busbw_gbps.top"].value == 2920
    assert _verdict(run, "fleet figures").status == "PASS"
    assert f"{measured:.4g} GB/s" in page(run)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"kind": "clusterbench-expected", "systems": [{"figures": [
        {"metric": "train.tgs", "value": 1, "unit": "GB/s", "source": "s"}]}]}))
    with pytest.raises(UsageError, match="unit GB/s given for train.tgs, which is no bandwidth"):
        expected.load(bad)


def test_a_rule_without_origin_judges_only_the_given_figure(tmp_path: Path) -> None:
    from clusterbench.analyse.rules import load_rules

    rules = tmp_path / "old.yaml"
    rules.write_text("rules:\n  - name: old expected rule\n    metric: comm.all_reduce.busbw_gbps.top\n"
                     "    function: expected\n    criteria: '>= 0.9'\n    missing: ignore\n")
    slow = _matched(_run(400))  # 82 % of the shipped 480: not this rule's business
    assert judge(slow, load_rules(rules)) == []
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {metric: a, function: expected, criteria: '> 1', origin: [everyone]}\n")
    with pytest.raises(UsageError, match="origin"):
        load_rules(bad)
