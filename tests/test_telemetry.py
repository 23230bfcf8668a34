"""Telemetry: the CPU sampler in real gloo runs, the GPU probe on a fake NVML, the rules on
synthetic records, and the report section with and without telemetry.csv."""

from __future__ import annotations

import csv
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import assert_one_line_error, read_run, run_cli
from fake_nvml import eight_h200, four_h100

from clusterbench.results import codec
from clusterbench.results.run import Env, Run
from clusterbench.stages.registry import expected_plots, judge, load_run, page, render_report, run_folder
from clusterbench.telemetry.cpu import CpuProbe
from clusterbench.telemetry.gpu import GpuProbe, reasons
from clusterbench.telemetry.metrics import telemetry_values
from clusterbench.telemetry.records import DeviceStage, Sample, Spread, StageWindow, Telemetry, read_samples
from clusterbench.telemetry.sampler import Sampler
from clusterbench.telemetry.summary import device_stage

QUICK_COMM = ["--comm-args", "--ops all_reduce -b 64K -e 1M --iters 3 --warmup 1"]


def _rows(folder: Path) -> list[dict[str, str]]:
    with open(folder / "telemetry.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_run_samples_each_stage_inside_its_window(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("run", "--skip", "train", *QUICK_COMM, "--peak-seconds", "0.3", "--telemetry-hz", "40",
                   "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    t = read_run(out)["telemetry"]
    windows = {w["name"]: (w["start_s"], w["end_s"]) for w in t["stages"]}
    # The stages of `run`, not `run` itself: a stage marked inside another takes its place.
    assert list(windows) == ["hardware", "peaks", "comm"] and t["hz"] == 40
    rows = _rows(out)
    assert {r["stage"] for r in rows} == set(windows)  # the short hardware stage too: one reading at its end
    for r in rows:
        start, end = windows[r["stage"]]
        assert start <= float(r["t_s"]) <= end, r
    # On CPUs one rank per host samples the CPU the ranks share.
    assert {(r["rank"], r["device"]) for r in rows} == {("0", "CPU")}
    for summary in t["devices"]:
        mine = [float(r["util_pct"]) for r in rows if r["stage"] == summary["stage"] and r["util_pct"]]
        assert summary["samples"] == sum(r["stage"] == summary["stage"] for r in rows)
        if mine:
            assert (summary["util_pct"]["min"], summary["util_pct"]["max"]) == pytest.approx((min(mine), max(mine)))
        else:  # a stage of a few ms: /proc/stat counts in 10 ms jiffies, so its one reading has no busy share
            assert summary["util_pct"] is None
    html = (out / "report.html").read_text()
    assert 'id="telemetry"' in html and 'data-plot="telemetry-util_pct"' in html
    assert html.count('<svg class="plot"') == expected_plots(load_run(out))


def test_comm_marks_its_stage_and_overwrite_with_telemetry_off(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["comm", "--nproc", "2", "-b", "1M", "-e", "4M", "--iters", "3", "--warmup", "1", "--out", str(out)]
    assert run_cli(*args, "--telemetry-hz", "50").returncode == 0
    (window,) = read_run(out)["telemetry"]["stages"]
    assert window["name"] == "comm" and all(r["stage"] == "comm" for r in _rows(out))
    proc = run_cli(*args, "--telemetry-hz", "0", "--overwrite")
    assert proc.returncode == 0, proc.stderr
    assert read_run(out)["telemetry"] is None and not (out / "telemetry.csv").exists()


@pytest.mark.parametrize("rate", ["-1", "500"])
def test_bad_rate_is_one_line(tmp_path: Path, rate: str) -> None:
    assert_one_line_error(run_cli("comm", "--telemetry-hz", rate, "--out", str(tmp_path / "r")), 2, "--telemetry-hz")


def test_gpu_probe_decodes_what_nvml_answers() -> None:
    fake = four_h100()
    probe = GpuProbe(fake, 0)
    first = probe.read()
    assert first == {
        "clock_mhz": 1980, "mem_clock_mhz": 2619, "power_w": 650.0, "temperature_c": 61, "util_pct": 97,
        "mem_util_pct": 41, "pcie_tx_mbps": 12.0, "pcie_rx_mbps": 3.0, "nvlink_tx_mbps": None,
        "nvlink_rx_mbps": None, "ecc_corrected": 0, "ecc_uncorrected": 0, "xid": 0, "throttle": "none",
    }  # NVLink is a rate: the first read only starts its counters
    fake.nvlink_kib[0] += 100_000
    fake.reasons[0] = 0x1 | 0x4 | 0x40
    fake.ecc[0] = [3, 1]
    fake.xids += [(0, 79), (1, 48), (0, 13)]  # GPU1's XID is not this probe's
    time.sleep(0.01)
    later = probe.read()
    assert later["nvlink_tx_mbps"] > 0 and later["nvlink_tx_mbps"] == later["nvlink_rx_mbps"]
    assert later["throttle"] == "gpu_idle+sw_power_cap+hw_thermal"
    assert (later["ecc_corrected"], later["ecc_uncorrected"], later["xid"]) == (3, 1, 2)
    assert reasons(0x8 | 0x800) == ["hw_slowdown", "0x800"]
    probe.close()


def test_gpu_probe_gives_none_for_what_nvml_cannot_answer() -> None:
    calls = ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPcieThroughput",
             "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetFieldValues")
    fake = eight_h200()
    fake.unsupported = {(name, 0) for name in calls} | {("nvmlEventSetCreate", None)}
    fake.reasons[0] = 0x80
    first = GpuProbe(fake, 0)
    first.read()
    reading = first.read()
    assert reading["throttle"] == "hw_power_brake"  # from the call's older name, which drivers before r535 have
    assert [k for k, v in reading.items() if v is None] == [
        "power_w", "util_pct", "mem_util_pct", "pcie_tx_mbps", "pcie_rx_mbps", "nvlink_tx_mbps", "nvlink_rx_mbps",
        "ecc_corrected", "ecc_uncorrected", "xid"]
    fake.unsupported.add(("nvmlDeviceGetCurrentClocksThrottleReasons", 0))
    assert GpuProbe(fake, 0).read()["throttle"] is None
    fake = eight_h200()
    fake.unsupported = {("nvmlDeviceRegisterEvents", 1)}
    assert GpuProbe(fake, 1).read()["xid"] is None and GpuProbe(fake, 0).read()["xid"] == 0


def _fake_host(root: Path, freq_khz: dict[int, int] | None, stat: str) -> None:
    for cpu, khz in (freq_khz or {}).items():
        d = root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_cur_freq").write_text(f"{khz}\n")
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc/stat").write_text(stat)
    (root / "proc/cpuinfo").write_text("processor\t: 0\ncpu MHz\t\t: 2100.5\n\nprocessor\t: 1\ncpu MHz\t\t: 2300.5\n")


def test_cpu_probe_reads_proc_and_sys(tmp_path: Path) -> None:
    _fake_host(tmp_path, {0: 2_000_000, 1: 3_000_000, 2: 9_000_000},
               "cpu  9 9 9 9 9 0 0 0 0 0\ncpu0 100 0 0 100 0 0 0 0 0 0\ncpu1 0 0 0 200 0 0 0 0 0 0\n")
    zone = tmp_path / "sys/class/thermal/thermal_zone0"
    zone.mkdir(parents=True)
    (zone / "type").write_text("x86_pkg_temp\n")
    (zone / "temp").write_text("55000\n")
    rapl = tmp_path / "sys/class/powercap/intel-rapl:0"
    rapl.mkdir(parents=True)
    (rapl / "energy_uj").write_text("1000000\n")
    probe = CpuProbe(tmp_path, cores=[0, 1])  # core 2 is not ours
    (tmp_path / "proc/stat").write_text("cpu0 150 0 0 150 0 0 0 0 0 0\ncpu1 100 0 0 200 0 0 0 0 0 0\n")
    time.sleep(0.05)
    (rapl / "energy_uj").write_text("11000000\n")
    reading = probe.read()
    assert reading["clock_mhz"] == 2500.0 and reading["temperature_c"] == 55.0
    assert reading["util_pct"] == pytest.approx(100 * 150 / 200)  # busy jiffies over all, of cores 0 and 1
    assert 0 < reading["power_w"] < 10 / 0.05  # 10 J over a little more than 0.05 s


def test_cpu_probe_falls_back_to_cpuinfo_and_none(tmp_path: Path) -> None:
    _fake_host(tmp_path, None, "")
    reading = CpuProbe(tmp_path, cores=[1]).read()
    assert reading == {"clock_mhz": 2300.5, "util_pct": None, "temperature_c": None, "power_w": None}
    assert CpuProbe(tmp_path / "nothing", cores=[0]).read()["clock_mhz"] is None


class Counter:
    """A probe whose readings count themselves."""

    def __init__(self) -> None:
        self.n = 0

    def read(self) -> dict:
        self.n += 1
        return {"util_pct": float(self.n)}


def test_sampler_keeps_readings_for_the_window_that_takes_them() -> None:
    start = time.time()
    sampler = Sampler(Counter(), hz=200)
    time.sleep(0.2)
    sampler.stop()
    end = time.time()
    taken = sampler.take(start, end)
    # a loaded machine ticks late, and missed ticks are skipped, never caught up in a burst
    assert 2 <= len(taken) <= 2 + (end - start) * 200 and all(start <= t <= end for t, _ in taken)
    assert sampler.take(start, end) == []  # taken once


def test_a_stage_shorter_than_the_period_still_gets_a_reading() -> None:
    sampler = Sampler(Counter(), hz=0.1)  # one reading at the start, the next 10 s later
    try:
        time.sleep(0.05)
        start = time.time()
        assert sampler.take(start, time.time()) == []
        t, reading = sampler.read_now()
        assert t >= start and reading["util_pct"] >= 1
    finally:
        sampler.stop()


def test_a_reading_now_never_waits_for_a_stuck_probe() -> None:
    entered, release = threading.Event(), threading.Event()

    class Stuck:  # a GPU whose driver does not answer
        def read(self) -> dict:
            entered.set()
            release.wait(10)
            return {}

    sampler = Sampler(Stuck(), hz=10)
    try:
        assert entered.wait(10)
        assert sampler.read_now() is None
    finally:
        release.set()
        sampler.stop()


def _stage(stage: str, device: str, clock: float = 1980, power: float = 650, host: str = "node-a",
           **kw) -> DeviceStage:
    return DeviceStage(stage, host, device, "NVIDIA H100 80GB HBM3", 0, 50, clock_mhz=Spread(clock, clock, clock),
                       power_w=Spread(power, power, power), util_pct=Spread(90, 97, 99),
                       ecc_corrected=Spread(0, 0, 0), ecc_uncorrected=Spread(0, 0, 0), throttle={}, **kw)


def _run(devices: list[DeviceStage]) -> Run:
    stages = [StageWindow("comm", 0.0, 10.0), StageWindow("train", 10.5, 30.0)]
    return Run(command="run", env=Env(hostname="node-a"), status="complete",
               sections={"telemetry": Telemetry(10.0, 1.7e9, stages, devices)})


HEALTHY = [_stage(s, f"GPU{i}") for s in ("comm", "train") for i in range(4)]


def _verdicts(devices: list[DeviceStage]) -> dict[str, tuple[str, str]]:
    return {v.check: (v.status, v.detail) for v in judge(_run(devices))
            if v.check in ("throttling", "ECC errors", "stragglers")}


def test_healthy_devices_pass_every_telemetry_rule() -> None:
    found = _verdicts(HEALTHY)
    assert {k: s for k, (s, _) in found.items()} == dict.fromkeys(("throttling", "ECC errors", "stragglers"), "PASS")


def test_throttled_stage_warns_naming_host_device_and_stage() -> None:
    hot = replace(HEALTHY[6], throttle={"gpu_idle": 0.5, "hw_thermal": 0.4})
    # At its power limit all stage long is a GPU at full load; a slowdown touched for a moment is no throttle.
    briefly = replace(HEALTHY[1], throttle={"sw_power_cap": 0.9, "hw_slowdown": 0.02})
    status, detail = _verdicts([*HEALTHY[:1], briefly, *HEALTHY[2:6], hot, HEALTHY[7]])["throttling"]
    assert status == "WARN"
    assert "node-a GPU2 (NVIDIA H100 80GB HBM3) in train: hw_thermal 40% of the samples" in detail
    assert "GPU1" not in detail and "gpu_idle" not in detail


def test_grown_ecc_fails() -> None:
    grown = replace(HEALTHY[7], ecc_uncorrected=Spread(0, 0, 2))
    status, detail = _verdicts([*HEALTHY[:7], grown])["ECC errors"]
    assert status == "FAIL" and "node-a GPU3 (NVIDIA H100 80GB HBM3): uncorrected 0 -> 2" in detail


def test_straggler_warns_and_idle_or_lone_devices_are_not_judged() -> None:
    slow = replace(HEALTHY[5], clock_mhz=Spread(1400, 1410, 1500))
    status, detail = _verdicts([*HEALTHY[:5], slow, *HEALTHY[6:]])["stragglers"]
    assert status == "WARN"
    assert detail.startswith("devices below their peers (1): node-a GPU1") and "0.71 x its peers' median" in detail
    idle = replace(slow, util_pct=Spread(0, 3, 10))  # idle clocks say nothing
    assert _verdicts([*HEALTHY[:5], idle, *HEALTHY[6:]])["stragglers"][0] == "PASS"
    moment = replace(slow, samples=1, util_pct=None)  # one reading of a short stage: not its steady clock
    assert _verdicts([*HEALTHY[:5], moment, *HEALTHY[6:]])["stragglers"][0] == "PASS"
    assert "telemetry.stragglers" not in telemetry_values(_run(HEALTHY[:1]))
    cpu = _run([replace(HEALTHY[0], throttle=None, ecc_corrected=None, ecc_uncorrected=None)])
    assert telemetry_values(cpu) == {}  # a lone CPU: nothing to judge, and the rules say nothing


def _samples() -> list[Sample]:
    return [Sample(t / 10, "comm" if t < 100 else "train", "node-a", f"GPU{gpu}", gpu, clock_mhz=1980.0 - gpu,
                   power_w=600.0 + t, temperature_c=60.0, util_pct=97.0, xid=0, throttle="none")
            for t in range(0, 300, 7) for gpu in range(2)]


def test_summary_of_samples_and_csv_round_trip(tmp_path: Path) -> None:
    samples = _samples()
    summary = device_stage("H100", [s for s in samples if s.device == "GPU1" and s.stage == "train"])
    assert summary.samples == 28 and summary.clock_mhz == Spread(1979.0, 1979.0, 1979.0)
    assert (summary.power_w.min, summary.power_w.max) == (705.0, 894.0) and summary.throttle == {}
    assert summary.xid_events == 0 and summary.nvlink_tx_mbps is None
    path = tmp_path / "telemetry.csv"
    _write_csv(path, samples)
    assert read_samples(path) == samples
    path.write_text(path.read_text().replace("600.0", "six hundred", 1))
    with pytest.raises(ValueError, match="line 2"):
        read_samples(path)


def _write_csv(path: Path, samples: list[Sample]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(codec.dump(samples[0])))
        writer.writeheader()
        writer.writerows(codec.dump(s) for s in samples)


def test_report_section_with_and_without_the_csv(tmp_path: Path) -> None:
    samples = _samples()
    devices = [device_stage("NVIDIA H100 80GB HBM3", [s for s in samples if (s.stage, s.device) == key])
               for key in (("comm", "GPU0"), ("comm", "GPU1"), ("train", "GPU0"), ("train", "GPU1"))]
    run = _run(devices)
    run_folder(tmp_path).save(run)
    _write_csv(tmp_path / "telemetry.csv", samples)
    html = render_report(tmp_path).read_text()
    n = expected_plots(load_run(tmp_path))
    assert n == 4 and html.count('<svg class="plot"') == n  # clock, power, temperature, utilisation
    assert '<a href="#telemetry">Telemetry</a>' in html and "min..max band" not in html
    assert "XID events" in html and "NVLink" not in html  # a column no device reported is left out
    (tmp_path / "telemetry.csv").unlink()
    html = render_report(tmp_path).read_text()
    assert html.count('<svg class="plot"') == n and "min..max band: telemetry.csv is not beside run.json" in html
    assert page(run).count('<svg class="plot"') == n  # a run alone, no folder
    (tmp_path / "telemetry.csv").write_text("t_s,stage\n1,comm\n")
    assert "telemetry.csv could not be read" in render_report(tmp_path).read_text()
