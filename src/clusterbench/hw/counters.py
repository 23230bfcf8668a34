"""The node's passive counters and events (docs/methodology.md §20), read without loading anything: each GPU's
ECC, row remaps, PCIe replays and PCIe link through NVML and sysfs, each NIC's and InfiniBand port's errors and
link flaps, and the Xid lines NVIDIA's driver left in the kernel log (hw/kernel_log.py, which says which are
recent). snapshot() reads them at one moment; states() says what is wrong now, growth() what grew between two
snapshots, figures() the counts the node rules judge. hw/events.py says what each counter and Xid means and calls
for.

Nothing here raises for what a node lacks or will not say: a file that cannot be read is skipped, and NVML that
cannot start or a kernel log that cannot be opened is named in the snapshot's `missing`.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterbench.hw import kernel_log, nvml
from clusterbench.hw.events import ACTIONS, COUNTERS, IB_STATES, XID_METRIC, Counter, xid
from clusterbench.hw.kernel_log import XidEvent
from clusterbench.results.findings import Finding

_VALUE_BYTES = 4096  # a sysfs value is one short line: a longer file holds none
# NVML C enum values (a stable ABI), literal as in telemetry/gpu.py.
_ECC_UNCORRECTED, _ECC_VOLATILE = 1, 0
_GEN_OF_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}  # sysfs says "16.0 GT/s PCIe"
_NIC_TOP = {"carrier_changes"}  # beside statistics/, which holds the other NIC counters
_IB_STATE = "port_state"


@dataclass(frozen=True)
class GpuRef:
    """A GPU to read, as the caller knows it."""

    label: str  # what findings call it: "cuda:0"
    uuid: str | None = None  # as torch or NVML spells it
    bus_id: str | None = None  # its PCI address, as NVML or sysfs spells it


def node_gpus() -> list[GpuRef]:
    """Every GPU NVML sees on this node, read once by its first rank: a scheduler that binds one GPU to each task
    (Slurm's --gpus-per-task, Ray) hides the others from torch, not from NVML. A GPU torch sees keeps torch's label
    ("cuda:0"); another is named by NVML's index, as nvidia-smi numbers it ("GPU 3"). Without NVML, the GPUs torch
    sees."""
    seen = {nvml.uuid_key(ref.uuid): ref for ref in _torch_gpus()}
    with nvml.session() as (lib, _):
        if lib is None:
            return list(seen.values())
        refs = []
        for i in range(nvml.call(lib, "nvmlDeviceGetCount") or 0):
            handle = nvml.call(lib, "nvmlDeviceGetHandleByIndex", i)
            uuid, pci = nvml.text(nvml.call(lib, "nvmlDeviceGetUUID", handle)), nvml.call(lib, "nvmlDeviceGetPciInfo",
                                                                                         handle)
            bus = nvml.bus_key(nvml.text(pci.busId) or "") if pci is not None else None
            mine = seen.get(nvml.uuid_key(uuid)) if uuid else None
            refs.append(GpuRef(mine.label if mine else f"GPU {i}", uuid, bus))
        return refs or list(seen.values())


def _torch_gpus() -> list[GpuRef]:
    """Every GPU torch sees in this process: torch's label, its UUID, its PCI address."""
    import torch  # only where GPUs are read: the counters themselves need no torch

    refs = []
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        p = torch.cuda.get_device_properties(i)
        refs.append(GpuRef(f"cuda:{i}", str(p.uuid), f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"))
    return refs


@dataclass(frozen=True)
class Snapshot:
    counters: dict[str, float]  # "SUBJECT/COUNTER": "eth0/carrier_changes", "mlx5_0:1/symbol_error", "cuda:0/..."
    xids: tuple[XidEvent, ...]  # every Xid line of the kernel log, oldest first, each told recent or not
    kernel_log: str | None  # where the Xids were read; None: no kernel log could be
    missing: tuple[str, ...]  # what could not be read, each in a few words
    taken_s: float  # time.monotonic()


def snapshot(gpus: list[GpuRef], sys_root: Path = Path("/sys"), kernel_log_file: Path | None = None,
             virtual: bool = False, kernel_now_s: float | None = None) -> Snapshot:
    """The node's counters and Xid events now: its NICs and InfiniBand ports, the GPUs in `gpus`, and the kernel
    log (`kernel_log_file`, a file of kernel lines such as dmesg writes, else /dev/kmsg). A NIC without a
    device behind it (veth, bridge, bond, tunnel) is read only with `virtual`: a container host makes and
    unmakes them by the minute, and their flaps say nothing of a cable. `kernel_now_s`: the kernel's seconds since
    boot that tell a recent Xid (default: now, by the clock the kernel stamps its records with)."""
    found = _nics(sys_root / "class" / "net", virtual) | _infiniband(sys_root / "class" / "infiniband")
    on_gpus, buses, missing = _gpus(gpus, sys_root)
    lines, source = kernel_log.read(kernel_log_file)
    if lines is None:
        missing.append(source)
    taken = time.monotonic()
    events = kernel_log.xids(lines or [], buses, kernel_now_s if kernel_now_s is not None else taken)
    return Snapshot(found | on_gpus, events, source if lines is not None else None, tuple(missing), taken)


def states(snap: Snapshot) -> list[Finding]:
    """What is wrong with the node now: uncorrectable ECC errors, retired pages or row remaps waiting for a reset,
    a failed remap, a PCIe link below its maximum, an InfiniBand port that is not ACTIVE, and the recent Xids (the
    older ones as information, judged by no rule)."""
    found = []
    for key, value in snap.counters.items():
        subject, c = _split(key)
        if c is not None and c.now and value != c.healthy:
            found.append(_state(subject, c, value, snap.counters))
    hours = kernel_log.RECENT_S / 3600
    recent = f"in the last {hours:g} hour{'' if hours == 1 else 's'} of this driver"
    return (found + _xid_findings([e for e in snap.xids if e.recent], recent)
            + _xid_findings([e for e in snap.xids if not e.recent], "earlier since boot", judged=False))


def growth(before: Snapshot, after: Snapshot) -> list[Finding]:
    """What grew from `before` to `after`: link flaps, NIC and InfiniBand errors, PCIe replays, ECC errors, and
    Xid events new in the kernel log."""
    seconds = after.taken_s - before.taken_s
    found = []
    for key, value in after.counters.items():
        subject, c = _split(key)
        if c is None or not c.grows or key not in before.counters:
            continue
        grew = _grew(before.counters[key], value)
        if grew > 0:
            what = f"{c.what} grew by {grew:g} in {seconds:.1f} s"
            if c.per > 1:
                what += f": {math.ceil(grew / c.per)} {c.event}"
            found.append(Finding(subject, what, c.severity, ACTIONS[c.action], c.metric))
    return found + _xid_findings(_new_xids(before, after), f"in {seconds:.1f} s")


def soaked(before: Snapshot, after: Snapshot) -> tuple[dict[str, float], list[Finding]]:
    """What a node's counters say of a soak from `before` to `after`: the counts the node rules judge (the states
    at its end, the growth over it, the Xids new in it) and the findings behind them."""
    found = growth(before, after) + [f for f in states(after) if f.metric and f.metric not in XID_METRIC.values()]
    return figures(before, after), found


def figures(before: Snapshot | None, after: Snapshot) -> dict[str, float]:
    """The counts the node rules judge, named counters.<metric>: of a state, how many GPUs or ports are in it
    (an error count adds up) in `after`; of a growing count, its growth from `before`; of Xid events by their
    severity, those new since `before`, else the recent ones of `after`. What the node cannot tell (no GPU, no
    InfiniBand, no kernel log, no earlier snapshot) is absent, not 0."""
    found: dict[str, float] = {}
    for key, value in after.counters.items():
        _, c = _split(key)
        if c is None or not c.metric:
            continue
        if c.now:
            add = value if c.grows else float(value != c.healthy)
        elif before is not None and key in before.counters:
            add = float(math.ceil(_grew(before.counters[key], value) / c.per))
        else:
            continue
        found[c.metric] = found.get(c.metric, 0.0) + add
    if after.kernel_log is not None:
        for metric in XID_METRIC.values():
            found.setdefault(metric, 0.0)
        judged = _new_xids(before, after) if before is not None else [e for e in after.xids if e.recent]
        for event in judged:
            found[XID_METRIC[xid(event.code).severity]] += 1
    return found


def _new_xids(before: Snapshot | None, after: Snapshot) -> list[XidEvent]:
    """The Xids in `after`'s kernel log that `before`'s did not hold (none where either could not be read)."""
    if before is None or before.kernel_log is None or after.kernel_log is None:
        return []
    seen = {_key(e) for e in before.xids}
    return [e for e in after.xids if _key(e) not in seen]


def _key(event: XidEvent) -> tuple[int, str, str, str]:
    return event.code, event.pci, event.stamp, event.detail  # not `recent`: an Xid grows old between two readings


def _split(key: str) -> tuple[str, Counter | None]:
    subject, _, name = key.rpartition("/")
    return subject, COUNTERS.get(name)


def _grew(old: float, new: float) -> float:
    return new - old if new >= old else new  # one that went back was reset, and has counted `new` since


def _state(subject: str, c: Counter, value: float, counters: dict[str, float]) -> Finding:
    if c.name == "pcie_width_drop":
        widest = counters.get(f"{subject}/pcie_width_max", value)
        what = f"PCIe link at x{widest - value:g} of x{widest:g}"
    elif c.name == "pcie_gen_drop":
        newest = counters.get(f"{subject}/pcie_gen_max", value)
        what = f"PCIe link at gen {newest - value:g} of {newest:g} while idle"
    elif c.name == _IB_STATE:
        what = f"port {IB_STATES.get(int(value), f'in state {value:g}')}, not {IB_STATES[int(c.healthy)]}"
    else:
        what = f"{value:g} {c.what}" if c.grows else c.what  # a count, else a flag that says it all
    return Finding(subject, what, c.severity, ACTIONS[c.action], c.metric)


def _xid_findings(events: Iterable[XidEvent], when: str, judged: bool = True) -> list[Finding]:
    """One finding per GPU and code (a GPU in trouble logs the same Xid many times), of the Xid's own severity and
    action where it is judged, else information."""
    groups: dict[tuple[str, int], list[XidEvent]] = {}
    for event in events:
        groups.setdefault((event.subject, event.code), []).append(event)
    found = []
    for (subject, code), seen in groups.items():
        x, last = xid(code), seen[-1]
        words = f"{x.what}: {last.detail}" if x.kind == "unknown" and last.detail else x.what
        times = "once" if len(seen) == 1 else f"{len(seen)} times"
        what = f"Xid {code} ({words}) {times} {when}, last at {last.stamp}"
        if judged:
            found.append(Finding(subject, what, x.severity, ACTIONS[x.action], XID_METRIC[x.severity]))
        else:
            found.append(Finding(subject, f"{what} (not judged: before the driver's last load or over "
                                          f"{kernel_log.RECENT_S / 3600:g} h ago)", "info", ACTIONS["earlier_xid"]))
    return found


def _read(path: Path) -> str | None:
    """A sysfs value, stripped; None when it cannot be read or is no short text. Opened non-blocking: a FIFO
    or a device where a value should be cannot hold us."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, ValueError):
        return None
    try:
        data = os.read(fd, _VALUE_BYTES + 1)
    except OSError:  # a folder, or EINVAL from a value the driver cannot give now
        return None
    finally:
        os.close(fd)
    if len(data) > _VALUE_BYTES:
        return None
    try:
        return data.decode("ascii").strip()
    except UnicodeDecodeError:
        return None


def _number(path: Path) -> float | None:
    text = _read(path)
    return float(text) if text is not None and text.isdigit() else None


def _folders(base: Path) -> list[Path]:
    try:
        return sorted(p for p in base.iterdir() if p.is_dir())
    except OSError:
        return []


def _nics(base: Path, virtual: bool) -> dict[str, float]:
    names = [c.name for c in COUNTERS.values() if c.of == "NIC"]
    found = {}
    for dev in _folders(base):
        if dev.name == "lo" or not (virtual or (dev / "device").exists()):
            continue
        for name in names:
            value = _number(dev / name if name in _NIC_TOP else dev / "statistics" / name)
            if value is not None:
                found[f"{dev.name}/{name}"] = value
    return found


def _infiniband(base: Path) -> dict[str, float]:
    names = [c.name for c in COUNTERS.values() if c.of == "InfiniBand port" and c.name != _IB_STATE]
    found = {}
    for dev in _folders(base):
        for port in _folders(dev / "ports"):
            subject = f"{dev.name}:{port.name}"
            for name in names:
                value = _number(port / "counters" / name)
                if value is not None:
                    found[f"{subject}/{name}"] = value
            # A RoCE port's state is its Ethernet link's, and a NIC that is down is no finding.
            state = re.match(r"(\d+):", _read(port / "state") or "")
            if state and _read(port / "link_layer") != "Ethernet":
                found[f"{subject}/{_IB_STATE}"] = float(state.group(1))
    return found


def _gpus(gpus: list[GpuRef], sys_root: Path) -> tuple[dict[str, float], dict[str, str], list[str]]:
    """The GPUs' counters, the PCI address of each GPU whose address is known, and what could not be read."""
    found: dict[str, float] = {}
    buses = {ref.label: nvml.bus_key(ref.bus_id) for ref in gpus if ref.bus_id}
    missing = []
    if gpus:
        with nvml.session() as (lib, why):
            if lib is None:
                missing.append(f"NVML: {why}")
            for ref in gpus if lib is not None else []:
                values, bus = _nvml(lib, ref)
                if bus is None and not values:
                    missing.append(f"{ref.label}: NVML does not know this GPU")
                found |= {f"{ref.label}/{name}": value for name, value in values.items()}
                if bus is not None:
                    buses.setdefault(ref.label, bus)
    for label, bus in buses.items():
        found |= {f"{label}/{name}": value for name, value in _pcie(sys_root / "bus" / "pci" / "devices" / bus).items()}
    return found, buses, missing


def _nvml(lib: Any, ref: GpuRef) -> tuple[dict[str, float], str | None]:
    """What NVML counts of the GPU, as health.nvml_faults reads it, and its PCI address."""
    if ref.uuid:
        handle = nvml.handle_of(lib, ref.uuid)
    else:
        handle = nvml.call(lib, "nvmlDeviceGetHandleByPciBusId", ref.bus_id)
    if handle is None:
        return {}, None
    pci = nvml.call(lib, "nvmlDeviceGetPciInfo", handle)
    rows = nvml.call(lib, "nvmlDeviceGetRemappedRows", handle)  # (corrected, uncorrected, pending, failed)
    values = {
        "ecc_uncorrected": nvml.call(lib, "nvmlDeviceGetTotalEccErrors", handle, _ECC_UNCORRECTED, _ECC_VOLATILE),
        "retired_pending": nvml.call(lib, "nvmlDeviceGetRetiredPagesPendingStatus", handle),
        "remap_pending": rows[2] if rows is not None else None,
        "remap_failed": rows[3] if rows is not None else None,
        "pcie_replays": nvml.call(lib, "nvmlDeviceGetPcieReplayCounter", handle),
    }
    bus = nvml.text(pci.busId) if pci is not None else None
    return {name: float(v) for name, v in values.items() if v is not None}, nvml.bus_key(bus) if bus else None


def _pcie(device: Path) -> dict[str, float]:
    """How far the PCIe link of a PCI device's sysfs folder runs below its maximum width and generation."""
    found = {}
    width, widest = _number(device / "current_link_width"), _number(device / "max_link_width")
    if width is not None and widest:
        found |= {"pcie_width_drop": max(0.0, widest - width), "pcie_width_max": widest}
    gen, newest = _generation(device / "current_link_speed"), _generation(device / "max_link_speed")
    if gen is not None and newest is not None:
        found |= {"pcie_gen_drop": float(max(0, newest - gen)), "pcie_gen_max": float(newest)}
    return found


def _generation(path: Path) -> int | None:
    match = re.match(r"(\d+(?:\.\d+)?) GT/s", _read(path) or "")  # "Unknown" where the link is down
    return _GEN_OF_GTS.get(float(match.group(1))) if match else None
