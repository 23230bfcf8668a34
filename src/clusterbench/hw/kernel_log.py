"""The Xid events NVIDIA's driver leaves in the kernel log (docs/methodology.md §20): read from /dev/kmsg (or, in
the tests, a file of kernel lines such as dmesg or journalctl -k write), each attributed to the GPU at its PCI
address, and told recent or not.

An Xid is an event, and the log keeps it until the node reboots; what the fault leaves behind that lasts (ECC
counts, pending remaps, a GPU gone from the bus, a GPU that computes wrong) the NVML counters, the device count and
the active checks see for as long as it lasts. So an Xid is judged only while it is recent: logged after the
driver's last load (a reload resets every GPU) and after the log's last boot, and at most RECENT_S before the
snapshot by the kernel's clock (seconds since boot, as /dev/kmsg and dmesg stamp each record). A GPU reset as
the action asks returns the node within that hour; an older Xid is still shown, as information. A line whose
time the kernel's clock does not give (a file stamped by the wall clock) is judged as recent.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

KMSG = Path("/dev/kmsg")
RECENT_S = 3600.0  # an hour: twelve of Slurm's health checks five minutes apart see it
# However large the kernel log, what is read of it is bounded: of a file its newest lines, of /dev/kmsg the
# oldest records the ring buffer still holds (a ring buffer is far smaller than this).
MAX_RECORDS = 100_000
MAX_LOG_BYTES = 16 * 1024**2
_KMSG_READ = 8192  # one read of /dev/kmsg returns one record, which the kernel keeps below this
_LINE_CHARS = 4096
_DETAIL_CHARS = 200

# NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.  Older drivers leave out
# "PCI:", newer ones may name the function.
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.[0-7])?\): "
                  r"(\d{1,6})\b,?\s*(.*)")
# The driver's first line as it loads: "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15 ...", or of
# the open modules "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  550.54.15 ...".
_DRIVER_LOAD = re.compile(r"NVRM: loading NVIDIA UNIX")
_BOOT = re.compile(r"^-- Boot [0-9a-f]+ --$")  # journalctl's line between two boots
_WHO = re.compile(r"^(?:(?:pid|name)=[^,]*,\s*)+")
_MONOTONIC = re.compile(r"\[\s*(\d+\.\d+)\]")  # dmesg's and journalctl -o short-monotonic's seconds since boot
_WALL = re.compile(r"^(\d{4}-\d\d-\d\dT\S+|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)")  # journalctl's default, -o short-iso


@dataclass(frozen=True)
class XidEvent:
    code: int
    pci: str  # domain:bus:device, as the driver names the GPU: "0000:3b:00"
    stamp: str  # the kernel's time of it ("20943.189436", "Dec 01 12:00:00"), else its place ("line 12")
    gpu: str | None  # the label of the GPU at that address; None: a GPU the snapshot was not handed
    detail: str = ""  # the driver's own words after the code
    recent: bool = True  # judged: see the module's doc

    @property
    def subject(self) -> str:
        return self.gpu or f"PCI:{self.pci}"


def read(path: Path | None) -> tuple[list[tuple[str, str]] | None, str]:
    """The kernel's lines as (time or place, text) and where they were read: `path`, a file of kernel lines, else
    /dev/kmsg; None and why not where it cannot be read."""
    return _log_file(path) if path is not None else _kmsg(KMSG)


def xids(lines: list[tuple[str, str]], buses: dict[str, str], now_s: float) -> tuple[XidEvent, ...]:
    """The Xid events among the kernel's lines, oldest first, each attributed to the GPU at its PCI address (`buses`:
    label -> address) and told recent or not against `now_s`, the kernel's seconds since boot now."""
    gpu_at = {bus.rsplit(".", 1)[0]: label for label, bus in buses.items()}
    events: list[XidEvent] = []
    for place, text in lines:
        if _DRIVER_LOAD.search(text) or _BOOT.match(text.strip()):
            events = [_aged(e, False) for e in events]  # before it: another life of the GPUs
            continue
        match = _XID.search(text)
        if match is None:
            continue
        domain, bus, device, code, rest = match.groups()
        pci = f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}"
        stamp = _stamp(text[:match.start()]) or place or "?"
        seconds = _seconds(stamp)
        recent = seconds is None or now_s - seconds <= RECENT_S
        events.append(XidEvent(int(code), pci, stamp, gpu_at.get(pci), _WHO.sub("", rest).strip()[:_DETAIL_CHARS],
                               recent))
    return tuple(events)


def _aged(event: XidEvent, recent: bool) -> XidEvent:
    return XidEvent(event.code, event.pci, event.stamp, event.gpu, event.detail, recent)


def _seconds(stamp: str) -> float | None:
    """The kernel's seconds since boot of a stamp that gives them."""
    return float(stamp) if re.fullmatch(r"\d+\.\d+", stamp) else None


def _stamp(prefix: str) -> str | None:
    """The time a line of a kernel log file gives before its message: seconds since boot where it has them, as
    /dev/kmsg's records are stamped, else the wall clock."""
    match = _MONOTONIC.search(prefix) or _WALL.match(prefix)
    return match.group(1) if match else None


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
            lines.append(kmsg_record(record))
    finally:
        os.close(fd)
    return lines, str(path)


def kmsg_record(record: bytes) -> tuple[str, str]:
    """(seconds since boot, as dmesg prints them, and the message) of "6,5774,20943189436,-;message\\n KEY=..."."""
    head, _, body = record.decode(errors="replace").partition(";")
    text = body.split("\n", 1)[0][:_LINE_CHARS]
    fields = head.split(",")
    if len(fields) < 3 or not fields[2].isdigit():
        return "", text
    usec = int(fields[2])
    return f"{usec // 1_000_000}.{usec % 1_000_000:06d}", text
