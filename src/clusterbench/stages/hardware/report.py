"""Report sections about the machine: the hardware picture and the measured peaks."""

from __future__ import annotations

from clusterbench.report.blocks import esc, facts, note, num, section, table
from clusterbench.stages.hardware.records import Gpu, Hardware, Nic, RdmaPort
from clusterbench.units import gib

# `nvidia-smi topo -m` cells, grouped from the fastest path to the slowest.
_CELL_CLASS = {"PIX": "pcie", "PXB": "pcie", "PHB": "host", "NODE": "host", "SYS": "sys", "X": "self"}


def hardware_section(hw: Hardware) -> str:
    cpu = hw.cpu
    cores = "/".join(esc(v) for v in (cpu.logical_cores, cpu.physical_cores, cpu.usable_cores))
    body = facts([
        ("host", esc(hw.hostname)),
        ("CPU", esc(cpu.model)),
        ("cores (logical/physical/usable)", cores),
        ("memory", esc(gib(hw.memory_bytes))),
        ("NUMA nodes", esc(len(hw.numa_nodes) or "-")),
        *((name, esc(value)) for name, value in hw.versions.items() if value),
    ])
    body += _gpu_table(hw.gpus) if hw.gpus else note(f"<b>{esc(hw.gpu_note or 'no GPU')}</b>: "
                                                     "the benchmarks ran on the CPU.")
    if hw.gpu_topology:
        body += "<h3>GPU-to-GPU topology</h3>" + _matrix(hw.gpus, hw.gpu_topology)
        body += f'<p class="lead">{esc(hw.topology_legend)}</p>'
    body += _network(hw.net, hw.rdma)
    return section("hardware", "Hardware", body)


def _gpu_table(gpus: list[Gpu]) -> str:
    rows = []
    for g in gpus:
        p = g.pcie
        pcie = f"gen{esc(p.gen_current)} x{esc(p.width_current)} / gen{esc(p.gen_max)} x{esc(p.width_max)}"
        if p.downtrained:
            pcie += ' <span class="bad">DOWNTRAINED</span>' if p.under_load else " (idle)"
        nvlink = f"NVLink {esc(g.nvlink_version)} × {g.nvlink_active}" if g.nvlink_active else "none"
        rows.append([
            f"GPU{g.index}", esc(g.name), esc(gib(g.memory_bytes)), pcie, num(p.gbps), nvlink,
            num(g.nvlink_gbps), num(g.peak_bf16_tflops), esc(g.numa_node),
        ])
    headers = ["GPU", "name", "memory", "PCIe now / max", "PCIe GB/s", "NVLink", "NVLink GB/s",
               "bf16 peak TFLOP/s", "NUMA"]
    return table(headers, rows, numeric_from=4)


def _matrix(gpus: list[Gpu], matrix: list[list[str]]) -> str:
    names = [f"GPU{g.index}" for g in gpus]
    head = "".join(f"<th>{n}</th>" for n in names)
    body = ""
    for name, row in zip(names, matrix):
        tds = "".join(
            f'<td class="{"nv" if cell.startswith("NV") else _CELL_CLASS.get(cell, "")}">{esc(cell)}</td>'
            for cell in row
        )
        body += f"<tr><th>{name}</th>{tds}</tr>"
    return f'<div class="scroll"><table class="matrix"><thead><tr><th></th>{head}</tr></thead>{body}</table></div>'


def _network(net: list[Nic], rdma: list[RdmaPort]) -> str:
    html = ""
    if net:
        rows = [[esc(n.name), esc(n.link_layer) + (" (virtual)" if n.virtual else ""),
                 esc(n.operstate), esc(n.speed_mbps), num(n.gbps), esc(n.mtu)] for n in net]
        html += "<h3>Network interfaces</h3>" + table(
            ["interface", "kind", "state", "speed Mb/s", "GB/s", "MTU"], rows, numeric_from=3)
    if rdma:
        rows = [[f"{esc(p.device)}/{esc(p.port)}", esc(p.kind), esc(p.state), esc(p.label or p.rate_text),
                 num(p.gbps)] for p in rdma]
        html += "<h3>RDMA ports</h3>" + table(["port", "kind", "state", "rate", "GB/s"], rows, numeric_from=4)
    elif net:
        html += note("No InfiniBand or RoCE ports: traffic between hosts would go over plain TCP.")
    return html


