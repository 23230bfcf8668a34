"""What a copy between the host and a GPU, or between two GPUs, can reach by the links NVML sees (the link table
of docs/methodology.md §2), and a GPU's PCIe link read while a copy loads it: the theoretical figures the
host_device and peer_copies checks are set against."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from clusterbench import limits
from clusterbench.hw import nvml
from clusterbench.hw.gpus import PCIE_CALLS, nvlinks


@dataclass(frozen=True)
class Theory:
    """A link's one-direction GB/s by its table figure, and the link in words."""

    gbps: float
    link: str  # "PCIe gen5 x16", "NVLink 4 x18"


@dataclass(frozen=True)
class GpuLinks:
    pcie: Theory | None  # at its maximum generation and width
    bus: str | None
    nvlink_gen: int | None
    to_gpu: dict[str, int]  # active NVLinks straight to a GPU, by its bus id
    to_switch: int  # active NVLinks to NVSwitches


def links_of(uuids: list[str]) -> dict[str, GpuLinks]:
    """Each GPU's links, by torch's UUID; a GPU NVML does not know is left out, and without NVML every one."""
    found: dict[str, GpuLinks] = {}
    with nvml.session() as (lib, _):
        for uuid in uuids if lib is not None else []:
            handle = nvml.handle_of(lib, uuid)
            if handle is None:
                continue
            _, _, gen_max, width_max = (nvml.call(lib, name, handle) for name in PCIE_CALLS)
            pcie = limits.pcie_gbps(gen_max, width_max) if gen_max and width_max else None
            pci = nvml.call(lib, "nvmlDeviceGetPciInfo", handle)
            active = [link for link in nvlinks(lib, handle) if link.active]
            to_gpu: dict[str, int] = {}
            for link in active:
                if link.remote_type == "GPU" and link.remote_bus_id:
                    to_gpu[link.remote_bus_id] = to_gpu.get(link.remote_bus_id, 0) + 1
            found[nvml.uuid_key(uuid)] = GpuLinks(
                Theory(pcie, f"PCIe gen{gen_max} x{width_max}") if pcie else None,
                nvml.bus_key(nvml.text(pci.busId) or "") if pci is not None else None,
                max((link.version or 0 for link in active), default=0) or None,
                to_gpu, sum(link.remote_type == "NVSwitch" for link in active))
    return found


def between(a: GpuLinks, b: GpuLinks) -> Theory | None:
    """What a copy from `a` to `b` can reach: their NVLinks where they have any between them (straight, or both
    through NVSwitches), else the slower of their PCIe links."""
    if a.nvlink_gen and b.nvlink_gen:
        links = a.to_gpu.get(b.bus or "", 0) + (min(a.to_switch, b.to_switch))
        gbps = limits.nvlink_gbps(min(a.nvlink_gen, b.nvlink_gen), links) if links else None
        if gbps:
            return Theory(gbps, f"NVLink {min(a.nvlink_gen, b.nvlink_gen)} x{links}")
    known = [t for t in (a.pcie, b.pcie) if t is not None]
    return min(known, key=lambda t: t.gbps) if len(known) == 2 else None


class PcieWatch:
    """A GPU's PCIe link read between the copies that load it: the highest generation and width it reached,
    against its maximum. An idle GPU lowers its generation on purpose, so only a reading under load is judged."""

    def __init__(self, uuid: str | None) -> None:
        self.uuid = uuid
        self.gen: int | None = None
        self.width: int | None = None
        self.gen_max: int | None = None
        self.width_max: int | None = None
        self._lib: Any = None
        self._handle: Any = None
        self._stack = ExitStack()

    def __enter__(self) -> Self:
        lib, _ = self._stack.enter_context(nvml.session())
        if lib is not None and self.uuid:
            self._lib, self._handle = lib, nvml.handle_of(lib, self.uuid)
            _, _, self.gen_max, self.width_max = (nvml.call(lib, name, self._handle) for name in PCIE_CALLS)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stack.close()

    def read(self) -> None:
        """One reading, kept where it is the highest so far (a link trains up with traffic)."""
        if self._handle is None:
            return
        gen, width = (nvml.call(self._lib, name, self._handle) for name in PCIE_CALLS[:2])
        if gen is not None:
            self.gen = gen if self.gen is None else max(self.gen, gen)
        if width is not None:
            self.width = width if self.width is None else max(self.width, width)

    @property
    def gen_drop(self) -> int | None:
        """How many generations below its maximum the link stayed under load; None: NVML could not tell."""
        if self.gen is None or self.gen_max is None:
            return None
        return max(0, self.gen_max - self.gen)
