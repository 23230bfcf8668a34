"""`clusterbench burnin` as users run it: real gloo ranks soaking for seconds, faults injected through the test-only
hooks (a flipped memory word, a slowed matmul, a rank killed), a real CPU quota midway, Ctrl-C; and the drift
detection of stages/burnin/metrics.py, the thinning of a long soak's series, and the judging of the nodes' counters and
the telemetry on soaks made to order."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path

import pytest
from conftest import assert_one_line_error, read_run, run_cli, run_side_by_side

from clusterbench import cli
from clusterbench.analyse.metrics import Metrics
from clusterbench.analyse.verdicts import overall
from clusterbench.commands import run as run_command
from clusterbench.hw.events import ACTIONS
from clusterbench.results import codec
from clusterbench.results.findings import Finding
from clusterbench.results.run import Run
from clusterbench.shape import JobShape
from clusterbench.stages.burnin import metrics
from clusterbench.stages.burnin.records import Burnin, NodeCounters, Window, WrongWord
from clusterbench.stages.burnin.series import Series
from clusterbench.stages.registry import judge, load_run, run_folder
from clusterbench.telemetry.records import DeviceStage, Spread, Telemetry

WINDOW = 0.5
SOAK = ["burnin", "--nproc", "2", "--duration", "6", "--window", str(WINDOW)]
WINDOW_COLUMNS = [f.name for f in fields(Window)]


def _section(out: Path) -> Burnin:
    return codec.load(Burnin, read_run(out)["burnin"])


def _csv_rows(out: Path) -> list[dict[str, str]]:
    with open(out / "burnin.csv") as f:
        return list(csv.DictReader(f))


def _windows_so_far(out: Path) -> list[dict]:
    """The rows burnin.csv holds so far: every window as it ends (run.json gets them only every so often)."""
    try:
        rows = _csv_rows(out)
    except OSError:  # not written yet
        return []
    return [{**row, "t_s": float(row["t_s"])} for row in rows if row.get("t_s")]  # a row caught half written: later


def _saved_windows(out: Path) -> list[dict]:
    """The windows run.json holds so far (saved once a second at most)."""
    try:
        return (read_run(out).get("burnin") or {}).get("windows", [])
    except (OSError, ValueError):  # not written yet, or caught between its write and its rename
        return []


def _started(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    """The CLI in its own process group, taking Ctrl-C as a terminal's foreground command does (a pytest started in
    the background ignores SIGINT, and so would the run it starts: a signal with a handler here is back to its
    default in the program started)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen([sys.executable, "-m", "clusterbench", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env={**os.environ, **(env or {})})
    finally:
        signal.signal(signal.SIGINT, before)


def _wait_for(out: Path, proc: subprocess.Popen, enough: Callable[[list[dict]], bool], within_s: float = 90,
              read: Callable[[Path], list[dict]] = _windows_so_far) -> list[dict]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and proc.poll() is None:
        windows = read(out)
        if enough(windows):
            return windows
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the soak never got there: {proc.communicate()}")


# --- real soaks ---------------------------------------------------------------------------------------------


def test_a_healthy_soak_passes_and_leaves_a_row_per_device_and_window(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # The two cores are shared with whatever else runs: a neighbour's load is a real fall in what a rank gets (a
    # test beside it halved one, 54 %; in a full run, 92 % of the memory test's), so this soak asks for no drift
    # judged at all; the faults below are found at their own tolerance.
    proc = run_cli(*SOAK, "--tolerance", "1", "--out", str(out), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("# burnin ")]
    assert len(lines) == 12 and all(" left: cpu " in line and "TFLOP/s, memory " in line and "busbw " in line
                                    and "0 wrong words" in line for line in lines), lines
    doc = read_run(out)
    assert doc["status"] == "complete" and doc["command"] == "burnin"
    b = _section(out)
    assert not b.partial and b.duration_s == 6 and b.window_s == WINDOW and b.level is None
    assert b.memory_bytes == 256 << 20  # a CPU's default: 256 MiB per rank, well within this host's memory
    assert [len(rows) for rows in metrics.series(b.windows).values()] == [12, 12]
    assert all(w.matmul_tflops > 0 and w.memory_gbps > 0 and w.busbw_gbps > 0 and w.wrong_words == 0
               and w.repeat_same and w.digest == b.windows[0].digest for w in b.windows)
    assert not [f for f in b.findings if f.severity == "critical"] and b.wrong == []
    rows = _csv_rows(out)
    assert len(rows) == 24 and list(rows[0]) == WINDOW_COLUMNS
    html = (out / "report.html").read_text()
    assert '<a href="#burnin">Burn-in</a>' in html and html.count('data-plot="burnin-') == 3
    verdicts = {v.check: v.status for v in judge(load_run(out)) if v.check.startswith("burnin")}
    # The CPU's telemetry has no ECC counts nor throttle reasons: those rules have nothing to judge.
    assert verdicts == {"burnin memory": "PASS", "burnin determinism": "PASS", "burnin agreement": "PASS",
                        "burnin drift": "PASS", "burnin soak": "PASS", "burnin counters": "PASS",
                        "burnin counter warnings": "PASS"}
    # The node's first rank read its counters at the start and in the last window: the soak's end.
    assert [(c.node, c.seconds >= 5) for c in b.counters] == [(b.windows[0].node, True)] and b.concluded


def test_a_flipped_word_and_a_matmul_slowed_midway_are_caught(tmp_path: Path) -> None:
    out = tmp_path / "run"
    slow_from = 3.0
    # A neighbour's load slows either rank for real (see above), in CI once rank 0's matmul to an eighth from 1.5 s
    # on: the slowed rank falls to a fiftieth, so its own step is the split that fits it best, and whether the
    # neighbours' load is judged a drift of rank 0's too is not this test's to say.
    proc = run_cli(*SOAK, "--memory-bytes", "64M", "--tolerance", "0.7", "--out", str(out), timeout=120,
                   env={"CLUSTERBENCH_TEST_FLIP": "0:2", "CLUSTERBENCH_TEST_SLOW": f"1:{slow_from:g}:50"})
    b = _section(out)
    assert [w.rank for w in b.wrong] == [0] and b.wrong[0].t_s >= 2 and int(b.wrong[0].wrote, 16) ^ int(b.wrong[0].read, 16) == 1
    assert_one_line_error(proc, 1, "burnin memory FAIL", "1 word read back wrong", f"0x{b.wrong[0].offset:x}")
    assert sum(w.wrong_words for w in b.windows) == 1
    (memory,) = [f for f in b.findings if "memory test" in f.what]
    assert memory.severity == "critical" and "RMA" in memory.action and f"0x{b.wrong[0].offset:x}" in memory.action
    drifts = [d for d in metrics.drifts(b) if d.figure == "matmul_tflops" and d.subject.startswith("rank 1 ")]
    assert len(drifts) == 1, metrics.drifts(b)
    assert drifts[0].shape == "step" and abs(drifts[0].start_s - slow_from) <= 2 * WINDOW, drifts
    assert drifts[0].fell > 0.9
    assert any(f.what.startswith("matmul TFLOP/s fell") and f.subject.startswith("rank 1") for f in b.findings)
    assert "CRITICAL rank 1 cpu on" in proc.stdout and "matmul TFLOP/s fell" in proc.stdout


def _cgroup() -> tuple[Path, str, str] | None:
    """(the folder new groups go in, the file that caps a group's CPU, what to write there), where this machine
    lets a test make one: root, and the cpu controller mounted (cgroup v1) or enabled for children (v2)."""
    if os.geteuid() != 0:
        return None
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_quota_us").exists() and os.access(v1, os.W_OK):
        return v1, "cpu.cfs_quota_us", "10000"  # of the default 100 ms period: a tenth of a core for all of them
    v2 = Path("/sys/fs/cgroup")
    with contextlib.suppress(OSError):
        if "cpu" in (v2 / "cgroup.subtree_control").read_text().split():
            return v2, "cpu.max", "10000 100000"
    return None


@pytest.mark.skipif(_cgroup() is None, reason="needs root and a cgroup cpu controller (v1 cpu, or v2 with cpu "
                                                "enabled for child groups) to cap the ranks' CPU")
def test_a_cpu_quota_put_on_the_ranks_midway_is_a_drift_from_when_it_began(tmp_path: Path) -> None:
    root, cap, quota = _cgroup()
    out = tmp_path / "run"
    # A tenth of a core for both ranks is a fall of 85 % or more even where a neighbour's load had taken two thirds
    # of theirs before: the quota's step is the split that fits each rank's series best.
    proc = _started([*SOAK[:4], "8", *SOAK[5:], "--memory-bytes", "32M", "--tolerance", "0.6", "--out", str(out)])
    group = root / f"clusterbench-test-{proc.pid}"
    group.mkdir()
    try:
        windows = _wait_for(out, proc, lambda ws: len(ws) >= 12)  # 3 s in, 6 windows a rank
        began = max(w["t_s"] for w in windows)
        (group / cap).write_text(quota)
        ranks = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True, check=False).stdout.split()
        for pid in ranks:
            if int(pid) != proc.pid:  # the ranks (and a forkserver): the CLI only waits for them
                with contextlib.suppress(ProcessLookupError, OSError):  # one that just ended
                    (group / "cgroup.procs").write_text(pid)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with contextlib.suppress(OSError):
            for pid in (group / "cgroup.procs").read_text().split():
                (root / "cgroup.procs").write_text(pid)
        group.rmdir()
    assert proc.returncode == 1 and "burnin drift FAIL" in stderr, stderr
    drifts = [d for d in metrics.drifts(_section(out)) if d.figure == "matmul_tflops"]
    assert {d.subject.split(" on ")[0] for d in drifts} == {"rank 0 cpu", "rank 1 cpu"}, drifts
    # The quota went on within a poll of the last window seen, and the step's start is a window's end.
    assert all(d.shape == "step" and began - WINDOW <= d.start_s <= began + 2 * WINDOW for d in drifts), (began, drifts)


def test_ctrl_c_mid_soak_keeps_its_rows_and_never_passes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _started([*SOAK[:4], "60", *SOAK[5:], "--memory-bytes", "32M", "--out", str(out)])
    _wait_for(out, proc, lambda ws: len(ws) >= 4, read=_saved_windows)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole process group
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    doc = read_run(out)
    assert doc["status"] == "interrupted"
    b = _section(out)
    assert b.partial and len(b.windows) >= 4 and b.elapsed_s < 60
    assert len(_csv_rows(out)) >= len(b.windows)
    # What the node's counters said of the soak up to its last reading is kept (the first window's, at least).
    assert [c.node for c in b.counters] == [b.windows[0].node] and 0 < b.counters[0].seconds < 60
    verdicts = judge(load_run(out))
    assert {v.check: v.status for v in verdicts}["burnin soak"] == "FAIL" and overall(verdicts) == "FAIL"


def test_a_rank_killed_mid_soak_is_named_and_its_windows_kept(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli(*SOAK, "--memory-bytes", "32M", "--timeout", "20", "--out", str(out), timeout=120,
                   env={"CLUSTERBENCH_TEST_FAULT": "kill:1:4"})
    assert_one_line_error(proc, 1, "rank 1 died", "during burnin window 4 of 12")
    doc = read_run(out)
    assert doc["status"] == "failed" and "rank 1 died" in doc["error"]
    b = _section(out)
    assert b.partial and [len(rows) for rows in metrics.series(b.windows).values()] == [3, 3]
    assert len(_csv_rows(out)) == 6


BAD_INPUT = {
    "zero": (["--duration", "0"], "must be more than 0"),
    "negative": (["--duration", "-5"], "must be more than 0"),
    "absurd": (["--duration", "1e9"], "at most 7 days"),
    "unreadable": (["--duration", "abc"], "cannot read 'abc' as a duration"),
    "level": (["--level", "bogus"], "invalid choice: 'bogus'"),
    "both": (["--duration", "60", "--level", "quick"], "--duration and --level both say how long"),
    "window": (["--duration", "5", "--window", "10"], "--window 10 is longer than the soak"),
    "unit": (["--memory-bytes", "1P"], "cannot read '1P' as a size"),
    "memory": (["--memory-bytes", "100000G"], "this host has"),
    "tolerance": (["--tolerance", "0"], "--tolerance: must be a finite number greater than 0"),
    "node rules": (["--node-rules", "/nowhere/rules.yaml"], "/nowhere/rules.yaml"),
}


def test_bad_input_is_one_line_and_exit_2_before_anything_runs(tmp_path: Path) -> None:
    done = run_side_by_side({name: ["burnin", "--nproc", "2", "--out", str(tmp_path / name), *args]
                             for name, (args, _) in BAD_INPUT.items()})
    for name, (_, needle) in BAD_INPUT.items():
        assert_one_line_error(done[name], 2, needle)
        assert not (tmp_path / name).exists(), name


def test_run_soaks_only_when_asked_and_help_states_the_levels() -> None:
    def plans(*words: str) -> dict[str, object]:
        plan = run_command.prepare(cli.build_parser().parse_args(["run", *words]), JobShape(2, "cpu", "gloo", 2))
        return {stage.name: p for stage, p in plan.stages}

    assert "burnin" not in plans()
    asked = plans("--burnin.level", "medium")["burnin"]
    assert asked.duration_s == 900 and asked.window_s == 15 and asked.windows == 60
    assert plans("--burnin-args", "--duration 2h")["burnin"].window_s == 30
    text = " ".join(cli.build_parser()._subparsers._group_actions[0].choices["burnin"].format_help().split())
    assert "quick 2 min, medium 15 min, long 1 h, extended 8 h" in text


# --- the analysis, on series made to order ------------------------------------------------------------------


def _times(n: int) -> list[float]:
    return [0.5 * (i + 1) for i in range(n)]


def test_a_step_down_is_a_drift_from_where_it_began() -> None:
    ys = [10.0, 10.2, 9.9, 10.1, 10.0, 9.8, 5.1, 5.0, 4.9, 5.2, 5.0]
    d = metrics.find_drift(_times(len(ys)), ys, 0.1)
    assert d is not None and d.shape == "step" and d.start_s == 3.0 and d.before == 10.0 and d.after == 5.0
    assert d.fell == pytest.approx(0.5)
    assert replace(d, subject="rank 0 cpu on n", figure="matmul_tflops").finding().what == (
        "matmul TFLOP/s fell 50% from 3.0 s on (10 -> 5)")


def test_a_step_down_is_found_through_noise_and_noise_alone_is_not() -> None:
    rng = random.Random(7)
    noisy = [100 * (1 + rng.uniform(-0.15, 0.15)) for _ in range(40)]
    assert metrics.find_drift(_times(40), noisy, 0.1) is None
    stepped = noisy[:25] + [y * 0.6 for y in noisy[25:]]
    d = metrics.find_drift(_times(40), stepped, 0.1)
    assert d is not None and d.shape == "step" and abs(d.start_s - 12.5) <= 1.0 and 0.3 < d.fell < 0.5


def test_flat_rising_small_and_short_series_are_no_drift() -> None:
    assert metrics.find_drift(_times(20), [5.0] * 20, 0.1) is None
    assert metrics.find_drift(_times(12), [5.0] * 6 + [9.0] * 6, 0.1) is None  # faster later: a warm-up
    assert metrics.find_drift(_times(12), [5.0] * 6 + [4.8] * 6, 0.1) is None  # within the tolerance
    assert metrics.find_drift(_times(5), [9.0, 9.0, 1.0, 1.0, 1.0], 0.1) is None  # fewer than 3 windows a side
    assert metrics.find_drift([], [], 0.1) is None


def test_a_steady_decline_is_told_from_a_step() -> None:
    ys = [10 - 0.25 * i for i in range(20)]  # 10 down to 5.25, evenly
    d = metrics.find_drift(_times(20), ys, 0.1)
    assert d is not None and d.shape == "decline" and d.before == pytest.approx(10.0) and d.after == pytest.approx(5.25)
    assert "fell 48% steadily over the soak" in replace(d, figure="memory_gbps").finding().what


def _window(rank: int, i: int, digest: str = "a", **figures: object) -> Window:
    return Window(rank, "n", "cpu", "EPYC", 0.5 * (i + 1), **{"matmul_tflops": 1.0, "memory_gbps": 5.0,
                                                                 "busbw_gbps": 3.0, "repeat_same": True,
                                                                 "digest": digest, **figures})


def test_a_device_outside_its_kinds_majority_or_its_own_first_result_is_critical() -> None:
    windows = [_window(r, i, "b" if (r, i) == (2, 4) else "a", repeat_same=(r, i) != (1, 5))
               for i in range(8) for r in range(3)]
    b = Burnin(4.0, 0.5, windows=windows)
    assert list(metrics.outvoted(b)) == [2] and list(metrics.repeats_changed(b)) == [1]
    m = Metrics()
    metrics.metrics(Run(status="complete", sections={"burnin": b}), m)
    assert m.values["burnin.outvoted"] == 1 and m.values["burnin.repeat_changed"] == 1
    assert m.values["burnin.partial"] == 0 and m.values["burnin.drift"] == 0 and m.values["burnin.windows"] == 8
    found = metrics.judge_soak(b, None, cut_short=False).findings
    assert [f.subject for f in found if f.severity == "critical"] == ["rank 1 cpu on n", "rank 2 cpu on n"]
    two = Burnin(4.0, 0.5, windows=[_window(r, i, "b" if (r, i) == (1, 3) else "a") for i in range(8) for r in (0, 1)])
    assert sorted(metrics.outvoted(two)) == [0, 1]  # two that disagree: no majority to say which


def test_a_soak_short_of_its_windows_is_partial_and_judged_on_what_it_measured() -> None:
    b = Burnin(6.0, 0.5, windows=[_window(r, i) for i in range(5) for r in (0, 1)])
    m = Metrics()
    reread = codec.load(Burnin, json.loads(json.dumps(codec.dump(b))))
    metrics.metrics(Run(status="failed", sections={"burnin": reread}), m)
    assert m.values["burnin.partial"] == 1 and m.values["burnin.windows"] == 5
    assert m.values["burnin.wrong_words"] == 0 and m.values["burnin.matmul_tflops.min"] == 1.0
    assert metrics.judge_soak(b, None, cut_short=False).partial


def test_a_wrong_word_with_its_top_bit_set_round_trips_through_run_json(tmp_path: Path) -> None:
    """run.json holds no number of 2**63 or more: the words are kept as text."""
    word = WrongWord(0, "cpu", 1.5, 4096, WrongWord.text(-1), WrongWord.text(-2))
    assert (word.wrote, word.read) == ("0xffffffffffffffff", "0xfffffffffffffffe")
    folder = run_folder(tmp_path).begin("burnin", [])
    folder.record(burnin=Burnin(6.0, 0.5, wrong=[word]))
    assert metrics.section(load_run(tmp_path)).wrong == [word]
    with pytest.raises(ValueError, match="not a 64-bit word"):
        WrongWord(0, "cpu", 1.5, 4096, "18446744073709551615", "0x0000000000000000")


def test_a_long_soak_is_thinned_in_run_json_and_judged_alike() -> None:
    """40 windows of 3 devices kept as at most 16 points each: rank 2's result strays in one window, rank 1's
    matmul halves from the 21st; both are still found, the drift where it began within a point of 4 windows."""
    series = Series(max_points=16)
    for i in range(40):
        series.add([_window(r, i, "b" if (r, i) == (2, 13) else "a", matmul_tflops=0.5 if r == 1 and i >= 20 else 1.0)
                    for r in range(3)])
    b = Burnin(20.0, 0.5, windows=series.windows(), tolerance=0.3)
    by = metrics.series(b.windows)
    assert [len(rows) for rows in by.values()] == [10] * 3
    assert [metrics.measured(rows) for rows in by.values()] == [40] * 3
    assert not metrics.partial(b) and list(metrics.repeats_changed(b)) == []
    assert list(metrics.outvoted(b)) == [2]
    (d,) = metrics.drifts(b)
    assert d.figure == "matmul_tflops" and d.subject.startswith("rank 1") and d.start_s == 10.0
    m = Metrics()
    metrics.metrics(Run(sections={"burnin": b}), m)
    assert m.values["burnin.windows"] == 40 and m.values["burnin.outvoted"] == 1


def test_the_nodes_counters_and_the_telemetry_over_a_soak_are_judged() -> None:
    """A finished soak whose node logged an Xid 79 during it, and whose GPU's uncorrected ECC count grew: neither
    passes, each finding names its node and carries its action."""
    xid = Finding("cuda:0", "Xid 79 (GPU has fallen off the bus) once in 4.0 s, last at 812.442108", "critical",
                  ACTIONS["reseat_rma"], "counters.xid_critical")
    drops = Finding("eth0", "received packets dropped grew by 3 in 4.0 s", "warning", ACTIONS["watch"],
                    "counters.nic_errors")
    windows = [_window(r, i) for i in range(8) for r in (0, 1)]
    b = Burnin(4.0, 0.5, windows=windows, counters=[NodeCounters("n", {"counters.xid_critical": 1.0,
                                                                        "counters.nic_errors": 0.0}, [xid, drops], 4.0)])
    gpu = DeviceStage("burnin", "n", "cuda:0", "H100", 0, 40, ecc_uncorrected=Spread(0, 1, 2),
                      ecc_corrected=Spread(5, 5, 5))
    run = Run(status="complete", sections={"burnin": b, "telemetry": Telemetry(1.0, 0.0, devices=[gpu])})
    verdicts = {v.check: v.status for v in judge(run)}
    assert (verdicts["burnin counters"], verdicts["burnin uncorrected ECC"], verdicts["burnin corrected ECC"]) == (
        "FAIL", "FAIL", "PASS")
    found = metrics.judged(run).findings
    (miss,) = [f for f in found if f.metric == "counters.xid_critical"]
    assert (miss.node, miss.severity, miss.action) == ("n", "critical", ACTIONS["reseat_rma"])
    assert miss.what.startswith("critical Xid events: cuda:0: Xid 79") and ACTIONS["reseat_rma"] in miss.what
    (ecc,) = [f for f in found if f.metric == "burnin.ecc_uncorrected"]
    assert ecc.node == "n" and "uncorrected ECC errors grew during the soak (0 -> 2)" in ecc.what
    # What no rule judged (the drops, where the NIC count the rule reads stayed 0) is kept, for the record.
    assert [(f.subject, f.severity) for f in found if "dropped" in f.what] == [("eth0 on n", "info")]

