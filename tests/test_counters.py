"""The node's passive counters and events (hw/counters.py, hw/events.py, hw/kernel_log.py): a real link flap in a
network namespace, Xid lines of kernel logs attributed to their GPUs and judged by their own severity only while
recent (a real dmesg log, a driver reloaded in it), a sysfs tree of InfiniBand ports and a PCIe link with
unreadable, garbage and huge files among them, NVML's counters, the GPUs NVML sees that torch does not, and a
node without NVML."""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
import time
from pathlib import Path

import pytest
from beds import netns_cluster
from fake_nvml import FakeNvml, FakeNvmlError, eight_h200, four_h100

from clusterbench.hw import counters, gpu_links, kernel_log, nvml
from clusterbench.hw.counters import GpuRef, figures, growth, snapshot, states
from clusterbench.hw.events import ACTIONS, COUNTERS, XID_METRIC, XIDS, xid
from clusterbench.nodechecks import node_rules
from clusterbench.results.findings import Finding

DATA = Path(__file__).parent / "data" / "kernel"
XIDS_NONE = {"counters.xid_critical": 0, "counters.xid_warning": 0, "counters.xid_info": 0}

# Run inside the namespace, where `ip netns exec` mounted a /sys of the namespace's own interfaces.
FLAP = """
import json, subprocess, sys
from dataclasses import asdict
from clusterbench.hw import counters
before = counters.snapshot([], virtual=True)  # a veth: no device behind it
for _ in range(2):
    for state in ("down", "up"):
        subprocess.run([sys.argv[1], "link", "set", "eth0", state], check=True)
after = counters.snapshot([], virtual=True)
print(json.dumps({"read": list(before.counters), "findings": [asdict(f) for f in counters.growth(before, after)],
                  "figures": counters.figures(before, after)}))
"""


def test_a_real_link_flapped_twice_is_two_flaps_and_a_cable_to_check() -> None:
    with netns_cluster(1) as bed:
        proc = bed.run(0, [sys.executable, "-c", FLAP, bed.ip], timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert "eth0/carrier_changes" in out["read"] and not any(key.startswith("lo/") for key in out["read"])
    flaps = [f for f in out["findings"] if f["metric"] == "counters.link_flaps"]
    assert len(flaps) == 1, out["findings"]
    # A veth's carrier goes off and on with the link: two carrier changes a flap.
    assert flaps[0]["subject"] == "eth0" and re.fullmatch(r"carrier changes grew by 4 in [\d.]+ s: 2 link flaps",
                                                          flaps[0]["what"]), flaps[0]
    assert (flaps[0]["severity"], flaps[0]["action"]) == ("critical", ACTIONS["cable"])
    assert out["figures"]["counters.link_flaps"] == 2


def _write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


KERNEL_LOG = (
    b"Dec 01 12:00:00 node7 kernel: NVRM: GPU at PCI:0000:3b:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae\n"
    b"Dec 01 12:00:00 node7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
    b"[ 5107.644336] NVRM: Xid (PCI:0000:3B:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    b"2026-12-01T12:00:01+0000 node7 kernel: NVRM: Xid (PCI:0000:86:00): 13, pid=99, name=python, Graphics "
    b"SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address\n"
    b"NVRM: Xid (0000:3b:00): 999, pid=1, name=x, a code of a newer driver\n"
    b"NVRM: Xid (PCI:zzzz:3b:00): 79, not an address\n"
    b"\x00\xff\xfe binary junk \x80 NVRM: Xid (PCI:0000:3b\n"
    b"-- Boot 1c0ffee --\n"
    b"[ 5200.000001] NVRM: Xid (PCI:0000:3b:00.0): 94, pid=5, name=train, Contained: SM (0x1). RST: No, D-RST: No\n"
)


def test_xid_lines_are_attributed_to_their_gpus_and_judged_by_the_table(tmp_path: Path) -> None:
    log = _write(tmp_path / "kernel.log", KERNEL_LOG)
    # NVML's spelling of the address: the driver's lines name it domain:bus:device, in either case.
    gpus = [GpuRef("cuda:0", None, "00000000:3B:00.0")]
    snap = snapshot(gpus, tmp_path / "sys", log, kernel_now_s=5300.0)
    assert snap.kernel_log == str(log)
    # Before journalctl's line between two boots, another life of the GPUs: shown, not judged.
    assert [(e.code, e.pci, e.gpu, e.stamp, e.recent) for e in snap.xids] == [
        (79, "0000:3b:00", "cuda:0", "Dec 01 12:00:00", False),
        (79, "0000:3b:00", "cuda:0", "5107.644336", False),
        (13, "0000:86:00", None, "2026-12-01T12:00:01+0000", False),
        (999, "0000:3b:00", "cuda:0", "line 5", False),
        (94, "0000:3b:00", "cuda:0", "5200.000001", True),
    ]
    assert snap.xids[1].detail == "GPU has fallen off the bus."
    found = states(snap)
    assert found[0] == Finding("cuda:0", "Xid 94 (contained ECC error: only the application that met it was stopped) "
                                         "once in the last 1 hour of this driver, last at 5200.000001", "warning",
                               ACTIONS["reset"], "counters.xid_warning")
    assert [(f.subject, f.what.split(" (")[0], f.severity, f.metric) for f in found[1:]] == [
        ("cuda:0", "Xid 79", "info", ""), ("PCI:0000:86:00", "Xid 13", "info", ""), ("cuda:0", "Xid 999", "info", "")]
    assert "2 times earlier since boot" in found[1].what and "not judged" in found[1].what
    assert figures(None, snap) == {**XIDS_NONE, "counters.xid_warning": 1}

    with log.open("ab") as f:
        f.write(b"[ 5300.5] NVRM: Xid (PCI:0000:3b:00): 119, pid=7, Timeout after 6s of waiting for RPC response\n")
    later = snapshot(gpus, tmp_path / "sys", log, kernel_now_s=9999.0)  # the 94 grew old meanwhile: not new
    (new,) = growth(snap, later)
    assert new.subject == "cuda:0" and new.what.startswith("Xid 119 (GSP RPC timeout) once in ")
    assert (new.severity, new.action, new.metric) == ("critical", ACTIONS["reset"], "counters.xid_critical")
    assert figures(snap, later) == {**XIDS_NONE, "counters.xid_critical": 1}  # over a soak: the new ones


def test_a_real_kernel_log_judges_each_xid_by_its_own_severity_only_while_recent(tmp_path: Path) -> None:
    """A dmesg log: an Xid 79 before the driver was reloaded (which resets every GPU), an Xid 92 (a high
    single-bit error rate: keep watching), an application's Xid 13, and later a double-bit error with its remap."""
    gpus = [GpuRef("cuda:0", None, "0000:3b:00.0"), GpuRef("cuda:1", None, "0000:86:00.0")]
    rules = node_rules.load()
    lines = (DATA / "dmesg-xid.log").read_bytes().splitlines(keepends=True)

    def judged(now_s: float) -> tuple[dict[str, float], list[node_rules.Miss]]:
        """The node as checked at `now_s`, its log as it stood then."""
        log = _write(tmp_path / "kernel.log", b"".join(line for line in lines if float(line[1:13]) <= now_s))
        snap = snapshot(gpus, tmp_path / "sys", log, kernel_now_s=now_s)
        return figures(None, snap), node_rules.judge(figures(None, snap), states(snap), rules)

    # 100 s after the Xid 92: a warning with its own action, not a FAIL; the Xid 79 of the driver's last life
    # judges nothing, though the GPU it fell from logs again since.
    counts, misses = judged(7300.0)
    assert counts == {**XIDS_NONE, "counters.xid_warning": 1}
    (miss,) = misses
    assert miss.level == "WARN" and miss.line == (
        "Xid warnings: cuda:1: Xid 92 (high single-bit ECC error rate) once in the last 1 hour of this driver, last "
        f"at 7200.504420 ({ACTIONS['watch']})")
    # The double-bit error and its remap: each its own action, on the FAIL line and what a fleet excludes for.
    counts, misses = judged(10600.0)
    assert counts == {**XIDS_NONE, "counters.xid_critical": 1, "counters.xid_warning": 2, "counters.xid_info": 2}
    assert [m.level for m in misses] == ["FAIL", "WARN"]
    assert f"cuda:0: Xid 48 (double-bit ECC error) once in the last 1 hour of this driver, last at 10500.961377 " \
           f"({ACTIONS['reset_rma']})" in misses[0].line
    assert misses[0].action == ACTIONS["reset_rma"] and "Xid 63" in misses[1].line
    excluded = misses[0].finding("n7")
    assert (excluded.severity, excluded.node, excluded.action) == ("critical", "n7", ACTIONS["reset_rma"])
    # An hour on, the GPU reset as the action asked, the node passes: what the error left, NVML's counts judge.
    counts, misses = judged(10600.0 + kernel_log.RECENT_S)
    assert counts == XIDS_NONE and misses == []


def test_a_huge_kernel_log_is_read_from_its_newest_lines_within_bounds(tmp_path: Path) -> None:
    old = b"[ 1.000000] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, an old one\n"
    newest = b"[ 9.000000] NVRM: Xid (PCI:0000:3b:00): 64, pid=1, the newest\n"
    many = _write(tmp_path / "many.log", old + b"x\n" * (kernel_log.MAX_RECORDS + 10) + newest)
    huge = tmp_path / "huge.log"
    with huge.open("wb") as f:
        f.truncate(4 * kernel_log.MAX_LOG_BYTES)  # sparse: 64 MiB of NULs, and no newline in them
        f.seek(0, os.SEEK_END)
        f.write(b"\n" + newest)
    started = time.monotonic()
    assert [e.code for e in snapshot([], tmp_path / "sys", many).xids] == [64]
    assert [e.code for e in snapshot([], tmp_path / "sys", huge).xids] == [64]
    assert time.monotonic() - started < 5
    for path, why in ((tmp_path / "absent.log", "cannot read"), (tmp_path, "not a regular file"),
                      (Path(os.devnull), "not a regular file")):
        snap = snapshot([], tmp_path / "sys", path)
        assert snap.kernel_log is None and why in snap.missing[0] and "counters.xid_critical" not in figures(None, snap)


def _sysfs(root: Path, link_downed: int, symbol_error: int) -> None:
    ib = root / "class" / "infiniband"
    port1 = ib / "mlx5_0" / "ports" / "1"
    for name, value in (("symbol_error", symbol_error), ("link_downed", link_downed), ("link_error_recovery", 0)):
        _write(port1 / "counters" / name, f"{value}\n")
    _write(port1 / "counters" / "port_rcv_errors", "not a number\n")
    big = port1 / "counters" / "excessive_buffer_overrun_errors"
    with big.open("wb") as f:
        f.truncate(64 * 1024**2)  # a value file of 64 MiB holds no value
    _write(port1 / "state", "4: ACTIVE\n")
    _write(port1 / "link_layer", "InfiniBand\n")
    _write(ib / "mlx5_0" / "ports" / "2" / "state", "1: DOWN\n")
    _write(ib / "mlx5_0" / "ports" / "2" / "link_layer", "InfiniBand\n")
    (ib / "mlx5_0" / "ports" / "2" / "counters" / "symbol_error").mkdir(parents=True, exist_ok=True)  # a folder, not a value
    _write(ib / "mlx5_1" / "ports" / "1" / "state", "1: DOWN\n")  # RoCE: its Ethernet link's state
    _write(ib / "mlx5_1" / "ports" / "1" / "link_layer", "Ethernet\n")
    nic = root / "class" / "net" / "ib0"
    (nic / "device").mkdir(parents=True, exist_ok=True)  # sysfs links a NIC to its device; a veth has none
    _write(root / "class" / "net" / "veth0" / "statistics" / "rx_errors", "7\n")
    _write(nic / "statistics" / "rx_errors", "5\n")
    _write(nic / "carrier_changes", b"\xff\xfe\n")
    _write(root / "class" / "net" / "lo" / "statistics" / "rx_errors", "9\n")
    if not (nic / "statistics" / "tx_errors").exists():
        os.mkfifo(nic / "statistics" / "tx_errors")  # nobody writes it: a blocking read would never return
    pci = root / "bus" / "pci" / "devices" / "0000:3b:00.0"
    for name, value in (("current_link_width", "8"), ("max_link_width", "16"), ("current_link_speed", "16.0 GT/s PCIe"),
                        ("max_link_speed", "32.0 GT/s PCIe")):
        _write(pci / name, value + "\n")


def test_a_sysfs_tree_of_ports_and_links_is_read_and_judged(tmp_path: Path) -> None:
    root, log = tmp_path / "sys", _write(tmp_path / "kernel.log", b"")
    gpus = [GpuRef("cuda:0", None, "0000:3b:00.0")]
    _sysfs(root, link_downed=1, symbol_error=0)
    before = snapshot(gpus, root, log)
    assert {k: v for k, v in before.counters.items() if not k.startswith("cuda:0/")} == {
        "ib0/rx_errors": 5, "mlx5_0:1/symbol_error": 0, "mlx5_0:1/link_downed": 1, "mlx5_0:1/link_error_recovery": 0,
        "mlx5_0:1/port_state": 4, "mlx5_0:2/port_state": 1}
    assert states(before) == [
        Finding("mlx5_0:2", "port DOWN, not ACTIVE", "critical", ACTIONS["cable"], "counters.ib_ports_down"),
        Finding("cuda:0", "PCIe link at x8 of x16", "warning", ACTIONS["reseat"], "counters.pcie_downtrained"),
        Finding("cuda:0", "PCIe link at gen 4 of 5 while idle", "info", ACTIONS["load"], ""),
    ]
    assert figures(None, before) == {"counters.ib_ports_down": 1, "counters.pcie_downtrained": 1, **XIDS_NONE}

    _sysfs(root, link_downed=3, symbol_error=7)
    after = snapshot(gpus, root, log)
    found = growth(before, after)
    assert [(f.subject, f.metric, f.severity, f.action) for f in found] == [
        ("mlx5_0:1", "counters.ib_errors", "warning", ACTIONS["cable"]),
        ("mlx5_0:1", "counters.link_flaps", "critical", ACTIONS["cable"])]
    assert found[0].what.startswith("symbol errors grew by 7 in ") and found[1].what.startswith("link downs grew by 2")
    judged = figures(before, after)
    assert (judged["counters.ib_errors"], judged["counters.link_flaps"], judged["counters.nic_errors"]) == (7, 2, 0)


class WornH100s(FakeNvml):
    """Two H100s as NVML answers for them; the second's memory worn, as a test sets it."""

    def __init__(self) -> None:
        super().__init__("NVIDIA H100 80GB HBM3", {}, {}, [(5, 16, 5, 16)] * 2)
        self.rows = {0: (0, 0, 0, 0), 1: (0, 0, 0, 0)}  # (corrected, uncorrected, pending, failed)
        self.replays = {0: 0, 1: 0}

    def nvmlDeviceGetRemappedRows(self, h):
        return self.rows[h]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        raise FakeNvmlError("Not Supported")  # a GPU that remaps rows retires no pages

    def nvmlDeviceGetPcieReplayCounter(self, h):
        return self.replays[h]


def test_nvml_counters_of_each_gpu_are_judged_now_and_as_they_grow(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # No GPU here: NVML's answers come from a fake, as tests of hw/ get them.
    fake = WornH100s()
    monkeypatch.setattr(nvml, "load", lambda: fake)
    log = _write(tmp_path / "kernel.log", b"[ 7.000000] NVRM: Xid (PCI:0000:19:00): 48, pid=3, DBE (0x1)\n")
    gpus = [GpuRef(f"cuda:{i}", f"0000000{i}-0000-0000-0000-000000000000") for i in range(2)]
    before = snapshot(gpus, tmp_path / "sys", log, kernel_now_s=60.0)
    assert before.counters == {f"cuda:{i}/{name}": 0 for i in range(2)
                               for name in ("ecc_uncorrected", "remap_pending", "remap_failed", "pcie_replays")}
    assert states(before)[0].subject == "cuda:1"  # the Xid's address is NVML's bus id of the second GPU

    fake.ecc[1][1], fake.rows[1], fake.replays[0] = 2, (0, 1, 1, 0), 5
    after = snapshot(gpus, tmp_path / "sys", log, kernel_now_s=60.0)
    assert states(after)[:2] == [
        Finding("cuda:1", "2 uncorrectable ECC errors since the driver loaded", "critical", ACTIONS["reset_rma"],
                "counters.ecc_uncorrected"),
        Finding("cuda:1", "row remaps wait for a GPU reset", "critical", ACTIONS["reset"], "counters.remap_pending")]
    assert [(f.subject, f.what.split(" in ")[0], f.action) for f in growth(before, after)] == [
        ("cuda:0", "PCIe replays grew by 5", ACTIONS["reseat"]),
        ("cuda:1", "uncorrectable ECC errors since the driver loaded grew by 2", ACTIONS["reset_rma"])]
    judged = figures(before, after)
    assert {k: judged[k] for k in ("counters.ecc_uncorrected", "counters.remap_pending", "counters.remap_failed",
                                   "counters.pcie_replays", "counters.xid_critical")} == {
        "counters.ecc_uncorrected": 2, "counters.remap_pending": 1, "counters.remap_failed": 0,
        "counters.pcie_replays": 5, "counters.xid_critical": 0}  # the Xid 48 was there before: not new
    assert figures(None, after)["counters.xid_critical"] == 1  # and recent
    assert "counters.retired_pending" not in judged  # NVML would not say: not judged, not 0
    # Under a scheduler that binds one GPU to this process, NVML still names every GPU of the node.
    refs = counters.node_gpus()
    assert [(r.label, r.bus_id) for r in refs] == [("GPU 0", "0000:18:00.0"), ("GPU 1", "0000:19:00.0")]


def test_what_a_copy_can_reach_by_its_links_and_a_pcie_link_read_under_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """The theoretical figures the host_device and peer_copies checks are set against, from NVML (a fake: no GPU
    here): NVLinks between a pair, straight or through NVSwitches, else PCIe; and a link that stays a generation
    below its maximum while copies load it."""
    def uuid(i: int) -> str:
        return f"0000000{i}-0000-0000-0000-000000000000"

    fake = four_h100()  # GPU0-GPU1 and GPU2-GPU3 joined by 4 NVLinks each; GPU3's PCIe at gen 4 of 5
    monkeypatch.setattr(nvml, "load", lambda: fake)
    links = {i: link for i, link in enumerate(gpu_links.links_of([uuid(i) for i in range(4)]).values())}
    assert gpu_links.between(links[0], links[1]) == gpu_links.Theory(100.0, "NVLink 4 x4")
    assert gpu_links.between(links[0], links[2]) == gpu_links.Theory(63.0, "PCIe gen5 x16")
    with gpu_links.PcieWatch(uuid(3)) as watch:
        watch.read()
    assert (watch.gen, watch.gen_max, watch.gen_drop) == (4, 5, 1)
    fake.pcie[3] = (5, 16, 5, 16)  # trained up under the copies' load
    with gpu_links.PcieWatch(uuid(3)) as watch:
        watch.read()
    assert watch.gen_drop == 0
    switched = eight_h200()
    monkeypatch.setattr(nvml, "load", lambda: switched)
    a, b = gpu_links.links_of([uuid(0), uuid(5)]).values()
    assert gpu_links.between(a, b) == gpu_links.Theory(450.0, "NVLink 4 x18")


def test_a_node_without_nvml_is_read_all_the_same() -> None:
    snap = snapshot([])
    assert snap.missing == () or snap.kernel_log is None
    assert not any(key.startswith("lo/") for key in snap.counters)
    assert isinstance(states(snap), list) and all(k.startswith("counters.") for k in figures(None, snap))
    with_gpu = snapshot([GpuRef("cuda:0", "0b11d014-1685-04bd-26ed-5fc0bc1c44ae")])
    # Where NVML cannot start (this CPU machine) it says why; where it can, it knows no GPU of that UUID.
    assert any("NVML" in why for why in with_gpu.missing), with_gpu.missing
    assert not any(key.startswith("cuda:0/") for key in with_gpu.counters)


def test_dev_kmsg_records_are_stamped_as_dmesg_prints_them() -> None:
    token = secrets.token_hex(4)
    try:
        with open(kernel_log.KMSG, "w") as kmsg:
            kmsg.write(f"clusterbench test_counters marker {token}\n")
    except OSError as e:
        pytest.skip(f"cannot write to {kernel_log.KMSG}: {e.strerror}")
    lines, source = kernel_log.read(None)
    assert lines is not None and source == str(kernel_log.KMSG)
    (stamp,) = [stamp for stamp, text in lines if text.endswith(f"marker {token}")]
    assert re.fullmatch(r"\d+\.\d{6}", stamp)


def test_the_tables_name_only_actions_they_have() -> None:
    assert {13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120, 121, 140, 143} <= set(XIDS)
    assert all(x.action in ACTIONS and x.severity in XID_METRIC for x in XIDS.values())
    assert all(c.action in ACTIONS and (c.now or c.grows) for c in COUNTERS.values())
    assert (xid(48).kind, xid(79).severity, xid(13).kind, xid(45).severity) == ("hardware", "critical",
                                                                               "application", "info")
    assert (xid(4242).severity, xid(4242).action) == ("warning", "triage")
