"""Report sections about the machine: the hardware picture and the measured peaks."""

from __future__ import annotations

from clusterbench import limits
from clusterbench.report.blocks import card, cards, details, esc, facts, note, num, pct, section, table
from clusterbench.results.hardware import Gpu, Hardware, MatmulPeak, Nic, Peaks, RdmaPort
from clusterbench.units import gib, human_bytes

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


def peaks_section(peaks: Peaks, hw: Hardware | None) -> str:
    """Measured matmul TFLOP/s per dtype and copy GB/s, against the datasheet where known."""
    names = {f"cuda:{g.index}": g.name for g in hw.gpus} if hw else {}
    by_dtype: dict[str, list[MatmulPeak]] = {}
    for m in peaks.matmul:
        by_dtype.setdefault(m.dtype, []).append(m)
    summary = [card(f"matmul {dtype}", num(max(m.tflops for m in ms)), "TFLOP/s, best device")
               for dtype, ms in by_dtype.items()]
    if peaks.copy:
        summary.append(card("memory copy", num(min(c.gbps for c in peaks.copy)), "GB/s, slowest device"))
    body = cards(summary)
    rows = []
    for dtype, ms in by_dtype.items():
        sheet = _datasheet(names.get(ms[0].device), dtype)
        low, high = min(m.tflops for m in ms), max(m.tflops for m in ms)
        rows.append([esc(dtype), esc(len(ms)), esc(ms[0].n), num(low), num(high), num(sheet),
                     pct(high / sheet if sheet else None)])
    if rows:
        body += "<h3>Matrix multiply (torch.mm of n × n, 2·n³ FLOP per call)</h3>" + table(
            ["dtype", "devices", "n", "slowest TFLOP/s", "fastest TFLOP/s", "datasheet", "fastest / datasheet"],
            rows)
        per_device = [[esc(m.device), esc(names.get(m.device) or "-"), esc(m.dtype), num(m.tflops)]
                      for ms in by_dtype.values() for m in ms]
        body += details("per device", table(["device", "name", "dtype", "TFLOP/s"], per_device, numeric_from=3))
    if peaks.copy:
        rows = [[esc(c.device), esc(human_bytes(c.nbytes, 3)), num(c.gbps)] for c in peaks.copy]
        body += "<h3>Device memory copy (read and write both counted)</h3>" + details(
            f"{len(peaks.copy)} devices", table(["device", "buffer", "GB/s"], rows))
    return section("peaks", "Peaks", body, lead="What this hardware reaches on a dense GEMM and a memory copy.")


def _datasheet(name: str | None, dtype: str) -> float | None:
    return limits.peak_tflops(name, dtype) if name else None
