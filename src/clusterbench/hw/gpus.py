"""Each GPU as NVML reports it: memory, PCIe link, NVLinks, and the GPU-to-GPU matrix."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from clusterbench import limits
from clusterbench.hw import peaks
from clusterbench.hw.host import numa_of_pci
from clusterbench.hw.nvml import bus_key, call, text, uuid_key
from clusterbench.stages.hardware.records import Gpu, NvLink, PcieLink

# NVML C enum values (a stable ABI), kept literal so a fake NVML needs no constants.
# nvmlDeviceGetNvLinkVersion answers nvmlNvlinkVersion_t, not the generation: an A100
# reports 5 (NVLink 3.1), an H100 6 (NVLink 4.0).
_NVLINK_ENUM_TO_GEN = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}
_NVLINK_REMOTE_TYPES = {0: "GPU", 1: "CPU", 2: "NVSwitch"}
_FEATURE_ENABLED = 1
# nvmlGpuTopologyLevel_t -> the `nvidia-smi topo -m` legend.
_TOPO_LEGEND = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
LEGEND_TEXT = (
    "NV# = # NVLinks, PIX/PXB = one/several PCIe switches, PHB = PCIe host bridge, "
    "NODE = same NUMA node, SYS = across NUMA nodes"
)
_IDLE_PCIE_NOTE = (
    "read while idle: GPUs lower the PCIe generation when idle, so current < max is only "
    "a downtrained link if it stays so under load (describe(pcie_load=True))"
)
PCIE_CALLS = (
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
)
_SAMPLE_INTERVAL_S = 0.05


def gpu(nvml: Any, index: int, handle: Any) -> Gpu:
    name = text(call(nvml, "nvmlDeviceGetName", handle))
    pci = call(nvml, "nvmlDeviceGetPciInfo", handle)
    bus_id = bus_key(text(pci.busId)) if pci is not None else None
    memory = call(nvml, "nvmlDeviceGetMemoryInfo", handle)
    links = nvlinks(nvml, handle)
    active = [link for link in links if link.active]
    gen = max((link.version or 0 for link in active), default=0) or None
    return Gpu(
        index=index,
        name=name,
        uuid=text(call(nvml, "nvmlDeviceGetUUID", handle)),
        bus_id=bus_id,
        numa_node=numa_of_pci(bus_id) if bus_id else None,
        memory_bytes=memory.total if memory is not None else None,
        peak_bf16_tflops=limits.peak_tflops(name, "bfloat16") if name else None,
        nvlink_links=links,
        nvlink_active=len(active),
        nvlink_version=gen,
        nvlink_gbps=limits.nvlink_gbps(gen, len(active)) if gen else None,
        pcie=_pcie_link(*_pcie(nvml, handle), under_load=False),
    )


def _pcie(nvml: Any, handle: Any) -> tuple[int | None, ...]:
    """(current generation, current width, max generation, max width)."""
    return tuple(call(nvml, name, handle) for name in PCIE_CALLS)


def _pcie_link(
    gen: int | None, width: int | None, gen_max: int | None, width_max: int | None, under_load: bool
) -> PcieLink:
    known = None not in (gen, width, gen_max, width_max)
    downtrained = (gen < gen_max or width < width_max) if known else None
    return PcieLink(
        gen_current=gen,
        width_current=width,
        gen_max=gen_max,
        width_max=width_max,
        gbps=limits.pcie_gbps(gen_max, width_max) if gen_max and width_max else None,
        gbps_current=limits.pcie_gbps(gen, width) if gen and width else None,
        downtrained=downtrained,
        under_load=under_load,
        note=_IDLE_PCIE_NOTE if downtrained and not under_load else None,
    )


def nvlinks(nvml: Any, handle: Any) -> list[NvLink]:
    links = []
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        # NotSupported (no NVLink) or InvalidArgument (past this GPU's last link).
        state = call(nvml, "nvmlDeviceGetNvLinkState", handle, link)
        if state is None:
            continue
        active = state == _FEATURE_ENABLED
        raw_version = call(nvml, "nvmlDeviceGetNvLinkVersion", handle, link)
        remote = remote_type = None
        if active:
            remote = call(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            remote_type = call(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        links.append(NvLink(
            link=link,
            active=active,
            version=_NVLINK_ENUM_TO_GEN.get(raw_version),
            nvml_version=raw_version,
            remote_bus_id=bus_key(text(remote.busId)) if remote is not None else None,
            remote_type=_NVLINK_REMOTE_TYPES.get(remote_type),
        ))
    return links


def topology_matrix(gpus: list[Gpu], level: Callable[[int, int], str]) -> list[list[str]]:
    """`nvidia-smi topo -m` cells: X, NV# (# links joining the pair), else the PCIe path."""
    index_of = {gpu.bus_id: gpu.index for gpu in gpus if gpu.bus_id}
    n = len(gpus)
    direct = [[0] * n for _ in range(n)]
    to_switch = [0] * n
    for gpu in gpus:
        for link in gpu.nvlink_links:
            if not link.active:
                continue
            if link.remote_type == "NVSwitch":
                to_switch[gpu.index] += 1
            elif link.remote_bus_id in index_of:
                direct[gpu.index][index_of[link.remote_bus_id]] += 1

    def cell(a: int, b: int) -> str:
        if a == b:
            return "X"
        links = max(direct[a][b], direct[b][a])
        # Behind NVSwitches every pair is joined by as many links as the lesser GPU has.
        if not links and to_switch[a] and to_switch[b]:
            links = min(to_switch[a], to_switch[b])
        return f"NV{links}" if links else level(a, b)

    return [[cell(a, b) for b in range(n)] for a in range(n)]


def pcie_level(nvml: Any, handles: list[Any], a: int, b: int) -> str:
    found = call(nvml, "nvmlDeviceGetTopologyCommonAncestor", handles[a], handles[b])
    return _TOPO_LEGEND.get(found, "?")


def pcie_under_load(nvml: Any, handles: list[Any], devices: list[int] | None,
                    seconds: float) -> list[PcieLink | None]:
    """PCIe readings of the GPUs behind `handles`, taken while host-to-device copies keep the
    CUDA devices `devices` (torch indices; None: all) busy; None for a GPU that was not kept busy."""
    samples: list[list[tuple[int | None, ...]]] = [[] for _ in handles]
    with peaks.busy_gpus(devices) as busy:
        deadline = time.monotonic() + seconds
        while True:
            for i, handle in enumerate(handles):
                samples[i].append(_pcie(nvml, handle))
            if not busy or time.monotonic() >= deadline:
                break
            time.sleep(_SAMPLE_INTERVAL_S)
    loaded = {uuid_key(uuid) for uuid in busy}
    readings: list[PcieLink | None] = []
    for i, handle in enumerate(handles):
        uuid = uuid_key(text(call(nvml, "nvmlDeviceGetUUID", handle)))
        if not uuid or uuid not in loaded:
            readings.append(None)
            continue
        # The link trains up with traffic; the highest reading is what it can hold.
        best = [max((v for v in col if v is not None), default=None) for col in zip(*samples[i])]
        readings.append(_pcie_link(*best, under_load=True))
    return readings
