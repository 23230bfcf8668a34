"""The hardware picture as compact terminal text (the HTML view is clusterbench.report)."""

from __future__ import annotations

from typing import Any


def render(info: dict[str, Any]) -> str:
    """A compact terminal picture of topology.describe()'s result."""
    cpu = info["cpu"]
    cores = "/".join(_or_dash(cpu[k]) for k in ("logical_cores", "physical_cores", "usable_cores"))
    numa = len(info["numa_nodes"]) or "-"
    host = f"host {info['hostname']}  |  {cpu['model']}, {cores} cores (logical/physical/usable)"
    lines = [
        f"{host}  |  mem {gib(info['memory_bytes'])}  |  NUMA nodes {numa}",
        "versions " + "  ".join(f"{k} {_or_dash(v)}" for k, v in info["versions"].items()),
    ]
    if not info["gpus"]:
        lines.append(info["gpu_note"] or "no GPU")
    lines += [_gpu_line(gpu) for gpu in info["gpus"]]
    if info["gpu_topology"]:
        lines.append(f"topology ({info['topology_legend']})")
        names = [f"GPU{gpu['index']}" for gpu in info["gpus"]]
        lines.append(" " * 6 + "".join(f"{name:>6}" for name in names) + "  NUMA")
        for gpu, name, row in zip(info["gpus"], names, info["gpu_topology"]):
            cells = "".join(f"{cell:>6}" for cell in row)
            lines.append(f"{name:<6}{cells}  {_or_dash(gpu['numa_node'])}")
    for nic in info["net"]:
        speed = "speed -"
        if nic["speed_mbps"]:
            speed = f"{nic['speed_mbps']} Mb/s ({_gbps(nic['gbps'])})"
        virtual = " virtual" if nic["virtual"] else ""
        state = f"{nic['operstate']} {speed} mtu {_or_dash(nic['mtu'])}{virtual}"
        lines.append(f"net  {nic['name']} {state}")
    for port in info["rdma"]:
        speed = f"{port['label']} {_gbps(port['gbps'])}" if port["gbps"] else port["rate_text"]
        where = f"{port['device']}/{port['port']}"
        lines.append(f"rdma {where} {port['kind']} {port['state']} {_or_dash(speed)}")
    return "\n".join(lines)


def _gpu_line(gpu: dict[str, Any]) -> str:
    cur, cur_w, top, top_w = (
        _or_dash(gpu[f"pcie_{k}"]) for k in ("gen_current", "width_current", "gen_max", "width_max")
    )
    pcie = f"PCIe gen{cur} x{cur_w} (max gen{top} x{top_w}, {_gbps(gpu['pcie_gbps'])})"
    if gpu["pcie_downtrained"]:
        pcie += " DOWNTRAINED" if gpu["pcie_under_load"] else " below max at idle"
    nvlink = "no NVLink"
    if gpu["nvlink_active"]:
        version = _or_dash(gpu["nvlink_version"])
        nvlink = f"NVLink{version} x{gpu['nvlink_active']} {_gbps(gpu['nvlink_gbps'])}"
    peak = gpu["peak_bf16_tflops"]
    peak_text = f"bf16 peak {peak:g} TFLOP/s" if peak else "bf16 peak unknown (measure it)"
    name = f"GPU{gpu['index']} {_or_dash(gpu['name'])}  {gib(gpu['memory_bytes'])}"
    return f"{name}  {pcie}  {nvlink}  {peak_text}"


def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)


def gib(nbytes: int | None) -> str:
    """Bytes as GiB with one decimal, "-" when unknown."""
    return "-" if nbytes is None else f"{nbytes / 2**30:.1f} GiB"


def _gbps(value: float | None) -> str:
    return "- GB/s" if value is None else f"{value:g} GB/s"
