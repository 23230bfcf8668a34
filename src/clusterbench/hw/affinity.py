"""Where a rank may run against where its GPU sits: its CPU affinity's NUMA nodes and the GPU's.

A rank pinned to another NUMA node's cores (the other socket's, or on a CPU split into several NUMA
nodes per socket another quadrant's) reaches its GPU, and the NIC beside it, across the link between
NUMA nodes: a frequent cause of "half the expected bandwidth" (docs/methodology.md §12).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from clusterbench.hw import nvml
from clusterbench.hw.host import numa_of_pci, read

NODES = Path("/sys/devices/system/node")


def parse_cpulist(text: str) -> set[int]:
    """The kernel's list form, "0-3,8,10-11", as a set of CPU numbers."""
    cpus: set[int] = set()
    for part in filter(None, text.strip().split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def cpulist(cpus: set[int]) -> str:
    """The kernel's list form of a set of CPU numbers."""
    spans: list[list[int]] = []
    for cpu in sorted(cpus):
        if spans and spans[-1][1] == cpu - 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def allowed_cpus() -> set[int]:
    """The CPUs this process may run on (all of them where the OS cannot say)."""
    if hasattr(os, "sched_getaffinity"):
        return os.sched_getaffinity(0)
    return set(range(os.cpu_count() or 1))


def numa_nodes_of(cpus: set[int], nodes: Path = NODES) -> list[int]:
    """The NUMA nodes whose CPUs these are; empty where sysfs shows no NUMA nodes."""
    found = []
    for node in nodes.glob("node[0-9]*"):
        if parse_cpulist(read(node / "cpulist") or "") & cpus:
            found.append(int(node.name[4:]))
    return sorted(found)


def device_numa(device: torch.device) -> int | None:
    """The NUMA node of this rank's GPU (NVML and sysfs), or None: a CPU, or a host that cannot say."""
    if device.type != "cuda":
        return None
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    with nvml.session() as (lib, _why):
        pci = nvml.call(lib, "nvmlDeviceGetPciInfo", nvml.handle_of(lib, uuid)) if lib is not None else None
    return numa_of_pci(nvml.bus_key(nvml.text(pci.busId))) if pci is not None else None


def mine(device: torch.device) -> tuple[str, list[int], int | None]:
    """(this process's CPUs in list form, their NUMA nodes, its GPU's NUMA node)."""
    cpus = allowed_cpus()
    return cpulist(cpus), numa_nodes_of(cpus), device_numa(device)
