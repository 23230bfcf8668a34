"""`clusterbench check`, a node's health check as Slurm runs one: exit 0 and one line on stdout when the
node is healthy; exit 1 and one line on stderr, the reason, when it is not, and within its budget however
the checks fare; one-line usage errors for a check that cannot run as asked. Slurm itself draining and
resuming nodes through the check: test_check_slurm.py."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import pytest
from conftest import assert_one_line_error, run_cli, run_side_by_side
from fake_nvml import four_h100

from clusterbench.results.documents import Band
from clusterbench.results.run import Run
from clusterbench.stages.fleet.records import Fleet
from clusterbench.stages.registry import run_folder

OTHER_CLASS = "NVIDIA H100 80GB HBM3 x8"
HEALTHY = r"clusterbench check: healthy: n1 \((cpu|\d+ x [^,]+), (\d) checks, \d+\.\d s\)"


def this_class() -> str:
    """This machine's hardware class, as the check names it."""
    from clusterbench.nodechecks import health  # torch: only in the tests that need a baseline

    return health.devices(None).klass


def write_baseline(folder: Path, klass: str, bands: dict[str, float], spread: float = 0.0, nodes: int = 10) -> Path:
    """A fleet run whose bands of `klass` have these medians (metric: median), as `clusterbench fleet` leaves one."""
    folder.mkdir(parents=True, exist_ok=True)
    fleet = Fleet(bands=[Band(klass, metric, median, spread * median, nodes) for metric, median in bands.items()])
    run_folder(folder).save(Run(command="fleet", status="complete", sections={"fleet": fleet}))
    return folder


def test_checks_judge_the_node_each_in_one_line(tmp_path: Path) -> None:
    klass = this_class()
    low = write_baseline(tmp_path / "low", klass, {"matmul_tflops": 1e-9, "copy_gbps": 1e-9})
    high = write_baseline(tmp_path / "high", klass, {"matmul_tflops": 1e9})
    other = write_baseline(tmp_path / "other", OTHER_CLASS, {"matmul_tflops": 700.0})
    thin = tmp_path / "thin"  # this class's bands stand on two nodes: they judge nobody
    thin.mkdir()
    run_folder(thin).save(Run(command="fleet", status="complete", sections={"fleet": Fleet(bands=[
        Band(klass, "matmul_tflops", 1e9, 0.0, 2), Band(OTHER_CLASS, "matmul_tflops", 700.0, 0.0, 10)])}))
    store = tmp_path / "results.db"
    quick = ["--node", "n1", "--numerics-steps", "0", "--store", "off"]
    done = run_side_by_side({
        "pass": ["check", "--node", "n1", "--numerics-steps", "2", "--baseline", str(low), "--store", str(store)],
        "band": ["check", *quick, "-v", "--baseline", str(high / "run.json"), "--drain-on-fail", "--dry-run"],
        "class": ["check", *quick, "--baseline", str(other)],
        "gpus": ["check", *quick, "--gpus", "1000"],
        "thin": ["check", *quick, "--baseline", str(thin), "--drain-on-fail", "--dry-run"],
    }, timeout=120)

    healthy = done["pass"]
    assert healthy.returncode == 0 and healthy.stderr == "", healthy.stderr
    assert re.fullmatch(HEALTHY, healthy.stdout.strip()), healthy.stdout
    assert re.fullmatch(HEALTHY, healthy.stdout.strip())[2] == "5"  # devices, counters, peaks, numerics, baseline
    # Recorded in the results store: each device's figures under the node, with its verdict.
    history = run_cli("history", "--store", str(store), "--node", "n1", "--metric", "check.matmul_tflops")
    assert history.returncode == 0 and re.search(r"check +check\.matmul_tflops .* PASS", history.stdout), history

    band = done["band"]
    err = assert_one_line_error(band, 1, "clusterbench check: n1: ", "matmul TFLOP/s", "measured again")
    assert f"of 10 {klass} nodes (baseline {high / 'run.json'})" in err
    # Measured twice, both printed with -v, before the drain it would run; each check of the table named as it starts.
    assert len([line for line in band.stdout.splitlines() if "matmul_tflops" in line]) == 2, band.stdout
    assert "# counters (passive): the node's error counters" in band.stdout
    assert "# peaks (active): dense matmul" in band.stdout
    assert band.stdout.splitlines()[-1].startswith(
        "would run: scontrol update nodename=n1 state=drain 'reason=clusterbench check: "), band.stdout
    assert_one_line_error(done["class"], 1, f"this node is {klass}", OTHER_CLASS)
    assert_one_line_error(done["gpus"], 1, "--gpus 1000 were expected")
    assert_one_line_error(done["thin"], 2, "stand on 2 node(s)", "judges nobody", "not judged, not drained")
    assert "would run" not in done["thin"].stdout


def test_a_budget_too_small_for_the_set_up_ends_at_the_budget_and_drains_nobody(tmp_path: Path) -> None:
    """Torch alone takes longer than 1 s to load, at a full CPU: the budget's fault, not the node's."""
    started = time.monotonic()
    late = run_cli("check", "--budget", "1", "--node", "n1", "--store", "off", "--drain-on-fail", "--dry-run",
                   timeout=60)
    took = time.monotonic() - started
    err = assert_one_line_error(late, 2, "clusterbench check: n1: did not finish within --budget 1 s",
                                "loading torch was still running", "the budget is too small", "not drained")
    assert "would run" not in late.stdout, late.stdout
    assert took < 30, took  # the watchdog ended it: no hang, whatever the load on this runner
    assert "--budget 1 s" in err


def test_a_check_that_cannot_run_as_asked_says_so_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    run_folder(tmp_path / "empty").save(Run(command="peak", status="complete"))
    cases = {
        "budget 0": ["check", "--budget", "0"],
        "budget absurd": ["check", "--budget", "1e9"],
        "no baseline": ["check", "--baseline", str(tmp_path / "nowhere")],
        "no bands": ["check", "--baseline", str(tmp_path / "empty")],
        "bands of one node": ["check", "--baseline", str(write_baseline(tmp_path / "one", "any", {"copy_gbps": 9.0},
                                                                        nodes=1))],
        "dry run alone": ["check", "--dry-run"],
    }
    done = run_side_by_side(cases, timeout=60)
    assert_one_line_error(done["budget 0"], 2, "--budget", "greater than 0")
    assert_one_line_error(done["budget absurd"], 2, "--budget", "at most 3600")
    assert_one_line_error(done["no baseline"], 2, "no run found", "nowhere")
    assert_one_line_error(done["no bands"], 2, "holds no fleet bands")
    assert_one_line_error(done["bands of one node"], 2, "stand on 1 node(s) at most", "judges nobody")
    assert_one_line_error(done["dry run alone"], 2, "--dry-run", "--drain-on-fail")
    # A health check runs outside any job: no SLURM_JOB_ID is asked for, only scontrol to act with.
    for flag in ("--drain-on-fail", "--resume-on-pass"):
        blind = run_cli("check", flag, env={"PATH": str(tmp_path)}, timeout=60)
        assert_one_line_error(blind, 2, flag, "scontrol is not on PATH")


def test_the_counters_check_fails_each_memory_fault_that_needs_a_reset(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """The GPU side of the counters check, on a fake NVML (no GPU here to read it from), judged by the node
    rules as `check` and `fleet` judge it."""
    from clusterbench.hw import counters, nvml
    from clusterbench.nodechecks import node_rules

    fake = four_h100()
    monkeypatch.setattr(nvml, "load", lambda: fake)
    gpus = [counters.GpuRef("cuda:1", "00000001-0000-0000-0000-000000000000"),
            counters.GpuRef("cuda:2", "00000002-0000-0000-0000-000000000000")]
    log = tmp_path / "kernel.log"
    log.write_text("")
    rules = node_rules.load()

    def misses() -> list[str]:
        snap = counters.snapshot(gpus, sys_root=tmp_path, kernel_log_file=log)
        return [m.line for m in node_rules.judge(counters.figures(None, snap), counters.states(snap), rules)]

    assert misses() == []  # and this fake NVML cannot tell retired pages or remapped rows
    fake.ecc[1] = [5, 2]  # corrected errors are the memory doing its job: only uncorrectable ones count
    fake.nvmlDeviceGetRetiredPagesPendingStatus = lambda h: int(h == 1)
    # (corrected, uncorrected, pending, failed)
    fake.nvmlDeviceGetRemappedRows = lambda h: (3, 1, 1, 0) if h == 1 else (0, 0, 0, 0)
    found = misses()
    assert [line.split(":")[0] for line in found] == ["uncorrectable ECC", "retired pages pending",
                                                      "row remaps pending"], found
    assert all("cuda:1" in line and "cuda:2" not in line for line in found)  # its neighbour is fine
    assert "(reset the GPU" in found[0]
    fake.nvmlDeviceGetRemappedRows = lambda h: (3, 9, 0, 1) if h == 1 else (0, 0, 0, 0)
    assert any(line.startswith("row remap failed: cuda:1") and "RMA" in line for line in misses())


def test_the_devices_of_a_node_vote_on_the_numerics() -> None:
    """Several devices, as a GPU node has, each device's losses of the numerics task as it trained them."""
    from clusterbench.nodechecks import health  # torch
    from clusterbench.stages.fleet.records import Numerics

    def runs(*losses: list[float]) -> list[Numerics]:
        return [Numerics(i, "", f"cuda:{i} (GPU)", list(of)) for i, of in enumerate(losses)]

    good, drifted = [8.25, 8.0], [8.25, 8.000001]
    health.judge_numerics(runs(good, good, good), "k")
    with pytest.raises(health.Unhealthy, match=r"^numerics: cuda:1 \(GPU\) leaves the majority \(2 of 3 devices\) "
                                               r"at step 2 of the numerics task: 8\.000001 against 8\.0$"):
        health.judge_numerics(runs(good, drifted, good), "k")
    with pytest.raises(health.Unhealthy, match="the 2 devices of k disagree on the numerics task"):
        health.judge_numerics(runs(good, drifted), "k")
    with pytest.raises(health.Unhealthy, match=r"cuda:0 \(GPU\) trains the numerics task to a loss of nan at step 2"):
        health.judge_numerics(runs([8.25, math.nan]), "k")
