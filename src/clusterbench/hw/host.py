"""What /proc, /sys and the Python runtime say about this host: CPU, memory, NUMA, versions."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

from clusterbench.stages.hardware.records import Cpu, NumaNode


def read(path: Path) -> str | None:
    """A sysfs or procfs file's text, stripped, or None when it cannot be read."""
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):  # e.g. EINVAL from "speed" of a link that is down
        return None


def read_int(path: Path) -> int | None:
    text = read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def numa_of(device: Path) -> int | None:
    """The NUMA node of a PCI device folder in sysfs; None when unknown (sysfs says -1)."""
    node = read_int(device / "numa_node")
    return node if node is not None and node >= 0 else None


def numa_of_pci(bus_id: str) -> int | None:
    """The NUMA node of a PCI device by its sysfs address (0000:18:00.0)."""
    return numa_of(Path("/sys/bus/pci/devices") / bus_id)


def cpu() -> Cpu:
    model = None
    for line in (read(Path("/proc/cpuinfo")) or "").splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    cores = set()
    for topo in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology"):
        cores.add((read(topo / "physical_package_id"), read(topo / "core_id")))
    return Cpu(
        # Arm CPUs have no "model name" line.
        model=model or platform.processor() or platform.machine() or None,
        logical_cores=os.cpu_count(),
        physical_cores=len(cores) or None,
        usable_cores=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    )


def meminfo_bytes(path: Path = Path("/proc/meminfo"), key: str = "MemTotal") -> int | None:
    # Lines look like "MemTotal:  123 kB" (and "Node 0 MemTotal:  123 kB" per NUMA node).
    match = re.search(rf"\b{key}:\s+(\d+)\s*kB", read(path) or "")
    return int(match.group(1)) * 1024 if match else None


def numa_nodes() -> list[NumaNode]:
    nodes = [NumaNode(int(node.name[4:]), read(node / "cpulist"), meminfo_bytes(node / "meminfo", "MemTotal"))
             for node in Path("/sys/devices/system/node").glob("node[0-9]*")]
    return sorted(nodes, key=lambda n: n.node)


def versions() -> dict[str, str | None]:
    """Software versions; "driver" is filled in from NVML when there is one."""
    import torch  # the rest of this module reads files: a reader of /proc need not pay for torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "nccl": _nccl_version(torch),
        "driver": None,
    }


def _nccl_version(torch: Any) -> str | None:
    # Asked of the build, not a device, so no CUDA context starts before workers fork.
    if not (torch.version.cuda or getattr(torch.version, "hip", None)):
        return None
    try:
        version = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):  # a build without NCCL has no version to give
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
