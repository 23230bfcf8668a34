"""The hardware picture of this host: CPU, memory, NUMA, GPUs and their links, NICs.

describe() never raises: whatever the OS, NVML or torch cannot tell is None, and a host
without NVIDIA GPUs gets "gpus": [] with a "gpu_note" saying why. The readers live in
host (/proc, /sys), network (NICs, RDMA ports) and gpus (NVML); all NVML access goes
through clusterbench.hw.nvml, the one boundary tests replace with a fake.
"""

from __future__ import annotations

import socket
from typing import Any

from clusterbench.hw import gpus, host, network, nvml
from clusterbench.hw.render import render

__all__ = ["describe", "render"]


def describe(pcie_load: bool = False) -> dict[str, Any]:
    """A JSON-serialisable picture of this host.

    GPUs lower the PCIe generation when idle, so an idle reading below max is only a hint.
    With pcie_load=True the current generation and width are re-read for 0.5 s while
    host-to-device copies keep the visible GPUs busy (pcie_under_load turns True for
    those). That starts CUDA in this process: do not use it in a parent that forks CUDA
    workers afterwards.
    """
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "cpu": host.cpu(),
        "memory_bytes": host.meminfo_bytes(),
        "numa_nodes": host.numa_nodes(),
        "versions": host.versions(),
        "gpus": [],
        "gpu_note": None,
        "gpu_topology": [],
        "topology_legend": gpus.LEGEND_TEXT,
        "net": network.net_interfaces(),
        "rdma": network.rdma_ports(),
    }
    with nvml.session() as (lib, why):
        if lib is None:
            info["gpu_note"] = f"no GPU ({why})"
            return info
        info["versions"]["driver"] = nvml.text(nvml.call(lib, "nvmlSystemGetDriverVersion"))
        count = nvml.call(lib, "nvmlDeviceGetCount")
        if not count:
            seen = "could not count devices" if count is None else "sees 0 devices"
            info["gpu_note"] = f"no GPU (NVML {seen})"
            return info
        handles = [nvml.call(lib, "nvmlDeviceGetHandleByIndex", i) for i in range(count)]
        found = [gpus.gpu(lib, i, h) for i, h in enumerate(handles)]
        if pcie_load:
            for gpu, reading in zip(found, gpus.pcie_under_load(lib, handles, seconds=0.5)):
                if reading["pcie_under_load"]:
                    gpu.update(reading)
        info["gpus"] = found
        info["gpu_topology"] = gpus.topology_matrix(found, lambda a, b: gpus.pcie_level(lib, handles, a, b))
    return info
