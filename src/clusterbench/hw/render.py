"""The hardware picture and measured peaks as compact terminal text (the HTML view is clusterbench.report)."""

from __future__ import annotations

from typing import Any

from clusterbench.stages.hardware.records import Gpu, Hardware
from clusterbench.stages.peaks.records import DevicePeaks
from clusterbench.units import gib

PEAK_HEADER = f"  {'device':<10} {'name':<28} {'dtype':<9} {'n':>6} {'TFLOP/s':>10} {'table':>8}"


def render(info: Hardware) -> str:
    """A compact terminal picture of topology.describe()'s result."""
    cpu = info.cpu
    cores = "/".join(_or_dash(v) for v in (cpu.logical_cores, cpu.physical_cores, cpu.usable_cores))
    numa = len(info.numa_nodes) or "-"
    host = f"host {info.hostname}  |  {cpu.model}, {cores} cores (logical/physical/usable)"
    lines = [
        f"{host}  |  mem {gib(info.memory_bytes)}  |  NUMA nodes {numa}",
        "versions " + "  ".join(f"{k} {_or_dash(v)}" for k, v in info.versions.items()),
    ]
    if not info.gpus:
        lines.append(info.gpu_note or "no GPU")
    lines += [_gpu_line(gpu) for gpu in info.gpus]
    if info.gpu_topology:
        lines.append(f"topology ({info.topology_legend})")
        names = [f"GPU{gpu.index}" for gpu in info.gpus]
        lines.append(" " * 6 + "".join(f"{name:>6}" for name in names) + "  NUMA")
        for gpu, name, row in zip(info.gpus, names, info.gpu_topology):
            cells = "".join(f"{cell:>6}" for cell in row)
            lines.append(f"{name:<6}{cells}  {_or_dash(gpu.numa_node)}")
    for nic in info.net:
        speed = f"{nic.speed_mbps} Mb/s ({_gbps(nic.gbps)})" if nic.speed_mbps else "speed -"
        virtual = " virtual" if nic.virtual else ""
        lines.append(f"net  {nic.name} {nic.operstate} {speed} mtu {_or_dash(nic.mtu)}{virtual}")
    for port in info.rdma:
        speed = f"{port.label} {_gbps(port.gbps)}" if port.gbps else port.rate_text
        lines.append(f"rdma {port.device}/{port.port} {port.kind} {port.state} {_or_dash(speed)}")
    return "\n".join(lines)


def _gpu_line(gpu: Gpu) -> str:
    p = gpu.pcie
    pcie = (f"PCIe gen{_or_dash(p.gen_current)} x{_or_dash(p.width_current)} "
            f"(max gen{_or_dash(p.gen_max)} x{_or_dash(p.width_max)}, {_gbps(p.gbps)})")
    if p.downtrained:
        pcie += " DOWNTRAINED" if p.under_load else " below max at idle"
    nvlink = "no NVLink"
    if gpu.nvlink_active:
        nvlink = f"NVLink{_or_dash(gpu.nvlink_version)} x{gpu.nvlink_active} {_gbps(gpu.nvlink_gbps)}"
    peak = gpu.peak_bf16_tflops
    peak_text = f"bf16 peak {peak:g} TFLOP/s" if peak else "bf16 peak unknown (measure it)"
    name = f"GPU{gpu.index} {_or_dash(gpu.name)}  {gib(gpu.memory_bytes)}"
    return f"{name}  {pcie}  {nvlink}  {peak_text}"


def peak_lines(entry: DevicePeaks) -> list[str]:
    """One device's measured peaks under PEAK_HEADER, and its copy bandwidth."""
    lines = []
    for m in entry.matmul:
        table = "-" if m.table_tflops is None else f"{m.table_tflops:g}"
        lines.append(f"  {entry.device:<10} {entry.name[:28]:<28} {m.dtype:<9} {m.n:>6} {m.tflops:>10.4g} {table:>8}")
    c = entry.copy
    lines.append(f"  {entry.device:<10} copy {c.nbytes >> 20} MiB: {c.gbps:.1f} GB/s")
    return lines


def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _gbps(value: float | None) -> str:
    return "- GB/s" if value is None else f"{value:g} GB/s"
