"""The hardware picture and the measured peaks, as run.json stores them.

Anything the OS, NVML or torch cannot tell is None. Units: bytes, GB/s = 1e9 bytes per
second in one direction, TFLOP/s = 1e12 FLOP per second (docs/methodology.md §2, §3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clusterbench.results.codec import AT_LEAST_ONE, NONNEGATIVE
from clusterbench.results.run import Section


@dataclass(frozen=True)
class Cpu:
    model: str | None = None
    logical_cores: int | None = field(default=None, metadata=AT_LEAST_ONE)
    physical_cores: int | None = field(default=None, metadata=AT_LEAST_ONE)
    # what the container or cgroup lets this process use
    usable_cores: int | None = field(default=None, metadata=AT_LEAST_ONE)


@dataclass(frozen=True)
class NumaNode:
    node: int = field(metadata=NONNEGATIVE)
    cpus: str | None = None
    memory_bytes: int | None = field(default=None, metadata=NONNEGATIVE)


@dataclass(frozen=True)
class NvLink:
    link: int
    active: bool
    version: int | None = None  # the generation (4 for H100), not NVML's enum value
    nvml_version: int | None = None
    remote_bus_id: str | None = None
    remote_type: str | None = None  # GPU, CPU or NVSwitch


@dataclass(frozen=True)
class PcieLink:
    """A GPU's PCIe link; an idle GPU parks it, so `downtrained` means something only `under_load`."""

    gen_current: int | None = None
    width_current: int | None = None
    gen_max: int | None = None
    width_max: int | None = None
    gbps: float | None = field(default=None, metadata=NONNEGATIVE)  # at the max generation and width
    gbps_current: float | None = field(default=None, metadata=NONNEGATIVE)
    downtrained: bool | None = None
    under_load: bool = False
    note: str | None = None


@dataclass(frozen=True)
class Gpu:
    index: int = field(metadata=NONNEGATIVE)
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = None  # as sysfs spells it: 0000:18:00.0
    numa_node: int | None = None
    memory_bytes: int | None = field(default=None, metadata=NONNEGATIVE)
    peak_bf16_tflops: float | None = field(default=None, metadata=NONNEGATIVE)
    nvlink_links: list[NvLink] = field(default_factory=list)
    nvlink_active: int = field(default=0, metadata=NONNEGATIVE)
    nvlink_version: int | None = None
    nvlink_gbps: float | None = field(default=None, metadata=NONNEGATIVE)
    pcie: PcieLink = field(default_factory=PcieLink)


@dataclass(frozen=True)
class Nic:
    name: str
    operstate: str | None = None
    speed_mbps: int | None = None
    mtu: int | None = None
    link_layer: str = "Ethernet"
    virtual: bool = False
    numa_node: int | None = None
    gbps: float | None = field(default=None, metadata=NONNEGATIVE)


@dataclass(frozen=True)
class RdmaPort:
    device: str
    port: str
    link_layer: str | None = None
    kind: str | None = None  # InfiniBand or RoCE
    state: str | None = None
    rate_gbit: float | None = field(default=None, metadata=NONNEGATIVE)
    rate_text: str | None = None
    label: str | None = None  # "IB NDR", "RoCE 400GbE"
    numa_node: int | None = None
    gbps: float | None = field(default=None, metadata=NONNEGATIVE)


@dataclass(frozen=True)
class Hardware:
    hostname: str
    cpu: Cpu = field(default_factory=Cpu)
    memory_bytes: int | None = field(default=None, metadata=NONNEGATIVE)
    numa_nodes: list[NumaNode] = field(default_factory=list)
    versions: dict[str, str | None] = field(default_factory=dict)
    gpus: list[Gpu] = field(default_factory=list)
    gpu_note: str | None = None  # why there is no GPU
    gpu_topology: list[list[str]] = field(default_factory=list)  # `nvidia-smi topo -m` cells
    topology_legend: str | None = None
    net: list[Nic] = field(default_factory=list)
    rdma: list[RdmaPort] = field(default_factory=list)


def _pcie_grouped(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 1 -> 2: a GPU's PCIe fields grouped under "pcie"."""
    hardware = doc.get("hardware")
    if not isinstance(hardware, dict) or not isinstance(hardware.get("gpus"), list):
        return doc
    gpus = []
    for gpu in hardware["gpus"]:
        if isinstance(gpu, dict):
            pcie = {k.removeprefix("pcie_"): v for k, v in gpu.items() if k.startswith("pcie_")}
            gpu = {k: v for k, v in gpu.items() if not k.startswith("pcie_")} | {"pcie": pcie}
        gpus.append(gpu)
    return {**doc, "hardware": {**hardware, "gpus": gpus}}


# Taken as every rank command begins (runtime/harness.py), and the hardware stage adds its links under load.
HARDWARE = Section("hardware", Hardware | None, upgrades={1: _pcie_grouped})
