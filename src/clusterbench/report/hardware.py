"""Report sections about the machine: the hardware picture and the measured peaks."""

from __future__ import annotations

from typing import Any

from clusterbench.hw import limits
from clusterbench.hw.render import gib
from clusterbench.report.blocks import card, cards, details, esc, facts, note, num, pct, section, table
from clusterbench.report.plots import human_bytes

# `nvidia-smi topo -m` cells, grouped from the fastest path to the slowest.
_CELL_CLASS = {"PIX": "pcie", "PXB": "pcie", "PHB": "host", "NODE": "host", "SYS": "sys", "X": "self"}


def hardware_section(hw: dict[str, Any]) -> str:
    cpu = hw.get("cpu") or {}
    cores = "/".join(esc(cpu.get(k)) for k in ("logical_cores", "physical_cores", "usable_cores"))
    versions = hw.get("versions") or {}
    body = facts([
        ("host", esc(hw.get("hostname"))),
        ("CPU", esc(cpu.get("model"))),
        ("cores (logical/physical/usable)", cores),
        ("memory", esc(gib(hw.get("memory_bytes")))),
        ("NUMA nodes", esc(len(hw.get("numa_nodes") or []) or "-")),
        *((name, esc(value)) for name, value in versions.items() if value),
    ])
    gpus = hw.get("gpus") or []
    body += _gpu_table(gpus) if gpus else note(f"<b>{esc(hw.get('gpu_note') or 'no GPU')}</b>: "
                                               "the benchmarks ran on the CPU.")
    if hw.get("gpu_topology"):
        body += "<h3>GPU-to-GPU topology</h3>" + _matrix(gpus, hw["gpu_topology"])
        body += f'<p class="lead">{esc(hw.get("topology_legend"))}</p>'
    body += _network(hw.get("net") or [], hw.get("rdma") or [])
    return section("hardware", "Hardware", body)


def _gpu_table(gpus: list[dict[str, Any]]) -> str:
    rows = []
    for g in gpus:
        pcie = f"gen{esc(g['pcie_gen_current'])} x{esc(g['pcie_width_current'])}"
        pcie += f" / gen{esc(g['pcie_gen_max'])} x{esc(g['pcie_width_max'])}"
        if g.get("pcie_downtrained"):
            pcie += ' <span class="bad">DOWNTRAINED</span>' if g.get("pcie_under_load") else " (idle)"
        nvlink = "none"
        if g.get("nvlink_active"):
            nvlink = f"NVLink {esc(g['nvlink_version'])} × {g['nvlink_active']}"
        rows.append([
            f"GPU{g['index']}", esc(g.get("name")), esc(gib(g.get("memory_bytes"))), pcie,
            num(g.get("pcie_gbps")), nvlink, num(g.get("nvlink_gbps")), num(g.get("peak_bf16_tflops")),
            esc(g.get("numa_node")),
        ])
    headers = ["GPU", "name", "memory", "PCIe now / max", "PCIe GB/s", "NVLink", "NVLink GB/s",
               "bf16 peak TFLOP/s", "NUMA"]
    return table(headers, rows, numeric_from=4)


def _matrix(gpus: list[dict[str, Any]], matrix: list[list[str]]) -> str:
    names = [f"GPU{g['index']}" for g in gpus]
    head = "".join(f"<th>{n}</th>" for n in names)
    body = ""
    for name, row in zip(names, matrix):
        tds = "".join(
            f'<td class="{"nv" if cell.startswith("NV") else _CELL_CLASS.get(cell, "")}">{esc(cell)}</td>'
            for cell in row
        )
        body += f"<tr><th>{name}</th>{tds}</tr>"
    return f'<div class="scroll"><table class="matrix"><thead><tr><th></th>{head}</tr></thead>{body}</table></div>'


def _network(net: list[dict[str, Any]], rdma: list[dict[str, Any]]) -> str:
    html = ""
    if net:
        rows = [[esc(n["name"]), esc(n["link_layer"]) + (" (virtual)" if n.get("virtual") else ""),
                 esc(n.get("operstate")), esc(n.get("speed_mbps")), num(n.get("gbps")), esc(n.get("mtu"))]
                for n in net]
        html += "<h3>Network interfaces</h3>" + table(
            ["interface", "kind", "state", "speed Mb/s", "GB/s", "MTU"], rows, numeric_from=3)
    if rdma:
        rows = [[f"{esc(p['device'])}/{esc(p['port'])}", esc(p.get("kind")), esc(p.get("state")),
                 esc(p.get("label") or p.get("rate_text")), num(p.get("gbps"))] for p in rdma]
        html += "<h3>RDMA ports</h3>" + table(["port", "kind", "state", "rate", "GB/s"], rows, numeric_from=4)
    elif net:
        html += note("No InfiniBand or RoCE ports: traffic between hosts would go over plain TCP.")
    return html


def peaks_section(peaks: dict[str, Any], hw: dict[str, Any] | None) -> str:
    """Measured matmul TFLOP/s per dtype and copy GB/s, against the datasheet where known."""
    names = {f"cuda:{g['index']}": g.get("name") for g in (hw or {}).get("gpus") or []}
    by_dtype: dict[str, list[dict[str, Any]]] = {}
    for m in peaks.get("matmul") or []:
        by_dtype.setdefault(m["dtype"], []).append(m)
    copy = peaks.get("copy") or []
    summary = [card(f"matmul {dtype}", num(max(m["tflops"] for m in ms)), "TFLOP/s, best device")
               for dtype, ms in by_dtype.items()]
    if copy:
        summary.append(card("memory copy", num(min(c["gbps"] for c in copy)), "GB/s, slowest device"))
    body = cards(summary)
    rows = []
    for dtype, ms in by_dtype.items():
        sheet = _datasheet(names.get(ms[0]["device"]), dtype)
        low, high = min(m["tflops"] for m in ms), max(m["tflops"] for m in ms)
        rows.append([esc(dtype), esc(len(ms)), esc(ms[0].get("n")), num(low), num(high), num(sheet),
                     pct(high / sheet if sheet else None)])
    if rows:
        body += "<h3>Matrix multiply (torch.mm of n × n, 2·n³ FLOP per call)</h3>" + table(
            ["dtype", "devices", "n", "slowest TFLOP/s", "fastest TFLOP/s", "datasheet", "fastest / datasheet"],
            rows)
        per_device = [[esc(m["device"]), esc(names.get(m["device"]) or "-"), esc(m["dtype"]), num(m["tflops"])]
                      for ms in by_dtype.values() for m in ms]
        body += details("per device", table(["device", "name", "dtype", "TFLOP/s"], per_device, numeric_from=3))
    if copy:
        rows = [[esc(c["device"]), esc(human_bytes(c["nbytes"]) if c.get("nbytes") else "-"), num(c["gbps"])]
                for c in copy]
        body += "<h3>Device memory copy (read and write both counted)</h3>" + details(
            f"{len(copy)} devices", table(["device", "buffer", "GB/s"], rows))
    return section("peaks", "Peaks", body, lead="What this hardware reaches on a dense GEMM and a memory copy.")


def _datasheet(name: str | None, dtype: str) -> float | None:
    return limits.peak_tflops(name, dtype) if name else None
