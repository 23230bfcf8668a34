"""The node's passive counters and events (docs/methodology.md §20), read without loading anything: each GPU's
ECC, row remaps, PCIe replays and PCIe link through NVML and sysfs, each NIC's and InfiniBand port's errors and
link flaps, and the Xid lines NVIDIA's driver left in the kernel log. snapshot() reads them at one moment;
states() says what is wrong now, growth() what grew between two snapshots, figures() the counts the node rules
judge. hw/events.py says what each counter and Xid means and calls for.

Nothing here raises for what a node lacks or will not say: a file that cannot be read is skipped, and NVML that
cannot start or a kernel log that cannot be opened is named in the snapshot's `missing`.
"""

from __future__ import annotations

import math
import os
import re
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterbench.hw import nvml
from clusterbench.hw.events import ACTIONS, COUNTERS, IB_STATES, XID_METRIC, Counter, xid
from clusterbench.results.findings import Finding

KMSG = Path("/dev/kmsg")
# However large the kernel log, what is read of it is bounded: of a file its newest lines, of /dev/kmsg the
# oldest records the ring buffer still holds (a ring buffer is far smaller than this).
MAX_RECORDS = 100_000
MAX_LOG_BYTES = 16 * 1024**2
_KMSG_READ = 8192  # one read of /dev/kmsg returns one record, which the kernel keeps below this
_VALUE_BYTES = 4096  # a sysfs value is one short line: a longer file holds none
_LINE_CHARS = 4096
_DETAIL_CHARS = 200
# NVML C enum values (a stable ABI), literal as in telemetry/gpu.py.
_ECC_UNCORRECTED, _ECC_VOLATILE = 1, 0
_GEN_OF_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}  # sysfs says "16.0 GT/s PCIe"
_NIC_TOP = {"carrier_changes"}  # beside statistics/, which holds the other NIC counters
_IB_STATE = "port_state"

# NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.  Older drivers leave out
# "PCI:", newer ones may name the function.
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.[0-7])?\): "
                  r"(\d{1,6})\b,?\s*(.*)")
_WHO = re.compile(r"^(?:(?:pid|name)=[^,]*,\s*)+")
_MONOTONIC = re.compile(r"\[\s*(\d+\.\d+)\]")  # dmesg's and journalctl -o short-monotonic's seconds since boot
_WALL = re.compile(r"^(\d{4}-\d\d-\d\dT\S+|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)")  # journalctl's default, -o short-iso


@dataclass(frozen=True)
class GpuRef:
    """A GPU to read, as the caller knows it."""

    label: str  # what findings call it: "cuda:0"
    uuid: str | None = None  # as torch or NVML spells it
    bus_id: str | None = None  # its PCI address, as NVML or sysfs spells it


def visible_gpus() -> list[GpuRef]:
    """Every GPU torch sees in this process, as the counters name them: torch's label, its UUID, its PCI address."""
    import torch  # only where GPUs are read: the counters themselves need no torch

    refs = []
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        p = torch.cuda.get_device_properties(i)
        refs.append(GpuRef(f"cuda:{i}", str(p.uuid), f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"))
    return refs


@dataclass(frozen=True)
class XidEvent:
    code: int
    pci: str  # domain:bus:device, as the driver names the GPU: "0000:3b:00"
    stamp: str  # the kernel's time of it ("20943.189436", "Dec 01 12:00:00"), else its place ("line 12")
    gpu: str | None  # the label of the GpuRef at that address; None: a GPU snapshot() was not handed
    detail: str = ""  # the driver's own words after the code

    @property
    def subject(self) -> str:
        return self.gpu or f"PCI:{self.pci}"


@dataclass(frozen=True)
class Snapshot:
    counters: dict[str, float]  # "SUBJECT/COUNTER": "eth0/carrier_changes", "mlx5_0:1/symbol_error", "cuda:0/..."
    xids: tuple[XidEvent, ...]  # every Xid line of the kernel log, oldest first
    kernel_log: str | None  # where the Xids were read; None: no kernel log could be
    missing: tuple[str, ...]  # what could not be read, each in a few words
    taken_s: float  # time.monotonic()


def snapshot(gpus: list[GpuRef], sys_root: Path = Path("/sys"), kernel_log: Path | None = None,
             virtual: bool = False) -> Snapshot:
    """The node's counters and Xid events now: its NICs and InfiniBand ports, the GPUs in `gpus`, and the kernel
    log (`kernel_log`, a file of kernel lines such as journalctl -k writes, else /dev/kmsg). A NIC without a
    device behind it (veth, bridge, bond, tunnel) is read only with `virtual`: a container host makes and
    unmakes them by the minute, and their flaps say nothing of a cable."""
    found = _nics(sys_root / "class" / "net", virtual) | _infiniband(sys_root / "class" / "infiniband")
    on_gpus, buses, missing = _gpus(gpus, sys_root)
    lines, source = _log_file(kernel_log) if kernel_log is not None else _kmsg(KMSG)
    if lines is None:
        missing.append(source)
    return Snapshot(found | on_gpus, _xids(lines or [], buses), source if lines is not None else None,
                    tuple(missing), time.monotonic())


def states(snap: Snapshot) -> list[Finding]:
    """What is wrong with the node now: uncorrectable ECC errors, retired pages or row remaps waiting for a reset,
    a failed remap, a PCIe link below its maximum, an InfiniBand port that is not ACTIVE, and every Xid since boot."""
    found = []
    for key, value in snap.counters.items():
        subject, c = _split(key)
        if c is not None and c.now and value != c.healthy:
            found.append(_state(subject, c, value, snap.counters))
    return found + _xid_findings(snap.xids, "since boot")


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
    if before.kernel_log is not None and after.kernel_log is not None:
        seen = set(before.xids)
        found += _xid_findings([e for e in after.xids if e not in seen], f"in {seconds:.1f} s")
    return found


def figures(before: Snapshot | None, after: Snapshot) -> dict[str, float]:
    """The counts the node rules judge, named counters.<metric>: of a state, how many GPUs or ports are in it
    (an error count adds up) in `after`; of a growing count, its growth from `before`; of Xid events, those in
    `after`'s kernel log by kind. What the node cannot tell (no GPU, no InfiniBand, no kernel log, no earlier
    snapshot) is absent, not 0."""
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
        for event in after.xids:
            found[XID_METRIC[xid(event.code).kind]] += 1
    return found


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
        what = f"PCIe link at gen {newest - value:g} of {newest:g}"
    elif c.name == _IB_STATE:
        what = f"port {IB_STATES.get(int(value), f'in state {value:g}')}, not {IB_STATES[int(c.healthy)]}"
    else:
        what = f"{value:g} {c.what}" if c.grows else c.what  # a count, else a flag that says it all
    return Finding(subject, what, c.severity, ACTIONS[c.action], c.metric)


def _xid_findings(events: Iterable[XidEvent], when: str) -> list[Finding]:
    """One finding per GPU and code: a GPU in trouble logs the same Xid many times."""
    groups: dict[tuple[str, int], list[XidEvent]] = {}
    for event in events:
        groups.setdefault((event.subject, event.code), []).append(event)
    found = []
    for (subject, code), seen in groups.items():
        x, last = xid(code), seen[-1]
        words = f"{x.what}: {last.detail}" if x.kind == "unknown" and last.detail else x.what
        times = "once" if len(seen) == 1 else f"{len(seen)} times"
        found.append(Finding(subject, f"Xid {code} ({words}) {times} {when}, last at {last.stamp}", x.severity,
                             ACTIONS[x.action], XID_METRIC[x.kind]))
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


def _log_file(path: Path) -> tuple[list[tuple[str, str]] | None, str]:
    """The newest lines of a file of kernel lines as (place, text), and its name; None and why not where it
    cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, ValueError) as e:
        return None, f"kernel log: cannot read {path} ({getattr(e, 'strerror', None) or e})"
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # a folder cannot be read, a FIFO or a device would feed us without end
        os.close(fd)
        return None, f"kernel log: {path} is not a regular file"
    with os.fdopen(fd, "rb") as f:
        start = max(0, info.st_size - MAX_LOG_BYTES)
        try:
            f.seek(start)
            data = f.read(MAX_LOG_BYTES)
        except OSError as e:
            return None, f"kernel log: cannot read {path} ({e.strerror or e})"
    lines = data.decode(errors="replace").split("\n")[1 if start else 0:]  # past the start, the first is cut
    kept = lines[-MAX_RECORDS:]
    skipped = len(lines) - len(kept)
    return [(f"line {skipped + i + 1}", line[:_LINE_CHARS]) for i, line in enumerate(kept)], str(path)


def _kmsg(path: Path) -> tuple[list[tuple[str, str]] | None, str]:
    """Every record the kernel's ring buffer holds as (seconds since boot, text), read without waiting for more;
    None and why not where it cannot be opened (a container, dmesg_restrict without CAP_SYSLOG)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        return None, f"kernel log: cannot open {path} ({e.strerror or e})"
    lines: list[tuple[str, str]] = []
    taken = 0
    try:
        for _ in range(MAX_RECORDS):
            try:
                record = os.read(fd, _KMSG_READ)
            except BrokenPipeError:  # overwritten while we read: the next read goes on from the oldest left
                continue
            except BlockingIOError:  # nothing more until the kernel logs again
                break
            except OSError as e:
                return None, f"kernel log: cannot read {path} ({e.strerror or e})"
            taken += len(record)
            if not record or taken > MAX_LOG_BYTES:
                break
            lines.append(_kmsg_record(record))
    finally:
        os.close(fd)
    return lines, str(path)


def _kmsg_record(record: bytes) -> tuple[str, str]:
    """(seconds since boot, as dmesg prints them, and the message) of "6,5774,20943189436,-;message\\n KEY=..."."""
    head, _, body = record.decode(errors="replace").partition(";")
    text = body.split("\n", 1)[0][:_LINE_CHARS]
    fields = head.split(",")
    if len(fields) < 3 or not fields[2].isdigit():
        return "", text
    usec = int(fields[2])
    return f"{usec // 1_000_000}.{usec % 1_000_000:06d}", text


def _xids(lines: list[tuple[str, str]], buses: dict[str, str]) -> tuple[XidEvent, ...]:
    """The Xid events among the kernel's lines, each attributed to the GPU at its PCI address."""
    gpu_at = {bus.rsplit(".", 1)[0]: label for label, bus in buses.items()}
    events = []
    for place, text in lines:
        match = _XID.search(text)
        if match is None:
            continue
        domain, bus, device, code, rest = match.groups()
        pci = f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}"
        stamp = _stamp(text[:match.start()]) or place or "?"
        events.append(XidEvent(int(code), pci, stamp, gpu_at.get(pci), _WHO.sub("", rest).strip()[:_DETAIL_CHARS]))
    return tuple(events)


def _stamp(prefix: str) -> str | None:
    """The time a line of a kernel log file gives before its message: seconds since boot where it has them, as
    /dev/kmsg's records are stamped, else the wall clock."""
    match = _MONOTONIC.search(prefix) or _WALL.match(prefix)
    return match.group(1) if match else None
