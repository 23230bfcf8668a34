"""The hardware picture of this host: CPU, memory, NUMA, GPUs and their links, NICs.

describe() never raises: whatever the OS, NVML or torch cannot tell is None, and a host
without NVIDIA GPUs gets no GPUs and a `gpu_note` saying why. The readers live in host
(/proc, /sys), network (NICs, RDMA ports) and gpus (NVML); all NVML access goes through
clusterbench.hw.nvml, the one boundary tests replace with a fake.
"""

from __future__ import annotations

import socket
from dataclasses import replace

from clusterbench.hw import gpus, host, network, nvml
from clusterbench.stages.hardware.records import Hardware, PcieLink

PCIE_LOAD_SECONDS = 0.5


def describe(pcie_load: bool = False) -> Hardware:
    """A picture of this host, from NVML and /sys: it starts no CUDA context unless asked to.

    GPUs lower the PCIe generation when idle, so an idle reading below max is only a hint.
    With pcie_load=True the current generation and width are re-read for half a second while
    host-to-device copies keep every visible GPU busy from this process (`clusterbench info
    --pcie-load`); ranks that each own a GPU use own_pcie_under_load() instead.
    """
    versions = host.versions()
    info = Hardware(hostname=socket.gethostname(), cpu=host.cpu(), memory_bytes=host.meminfo_bytes(),
                    numa_nodes=host.numa_nodes(), versions=versions, topology_legend=gpus.LEGEND_TEXT,
                    net=network.net_interfaces(), rdma=network.rdma_ports())
    with nvml.session() as (lib, why):
        if lib is None:
            return replace(info, gpu_note=f"no GPU ({why})")
        versions["driver"] = nvml.text(nvml.call(lib, "nvmlSystemGetDriverVersion"))
        count = nvml.call(lib, "nvmlDeviceGetCount")
        if not count:
            seen = "could not count devices" if count is None else "sees 0 devices"
            return replace(info, gpu_note=f"no GPU (NVML {seen})")
        handles = [nvml.call(lib, "nvmlDeviceGetHandleByIndex", i) for i in range(count)]
        found = [gpus.gpu(lib, i, h) for i, h in enumerate(handles)]
        if pcie_load:
            # Every device torch sees (NVML counts GPUs CUDA_VISIBLE_DEVICES hides too): UUIDs pair them up.
            readings = gpus.pcie_under_load(lib, handles, None, PCIE_LOAD_SECONDS)
            found = [replace(g, pcie=r) if r is not None else g for g, r in zip(found, readings)]
        matrix = gpus.topology_matrix(found, lambda a, b: gpus.pcie_level(lib, handles, a, b))
        return replace(info, gpus=found, gpu_topology=matrix)


def own_pcie_under_load(device_index: int, uuid: str) -> PcieLink | None:
    """This rank's GPU's PCIe link, read while this rank alone keeps it busy; None if NVML cannot tell."""
    with nvml.session() as (lib, _):
        if lib is None:
            return None
        handle = nvml.handle_of(lib, uuid)
        if handle is None:
            return None
        return gpus.pcie_under_load(lib, [handle], [device_index], PCIE_LOAD_SECONDS)[0]


def with_pcie_readings(info: Hardware, readings: dict[str, PcieLink]) -> Hardware:
    """The picture with the loaded readings (by GPU UUID) that ranks on this host took."""
    keyed = {nvml.uuid_key(uuid): link for uuid, link in readings.items()}
    found = [replace(g, pcie=keyed[nvml.uuid_key(g.uuid)]) if nvml.uuid_key(g.uuid) in keyed else g
             for g in info.gpus]
    return replace(info, gpus=found)
