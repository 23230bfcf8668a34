"""The report's peaks section: each device's measured figures beside its datasheet's."""

from __future__ import annotations

from clusterbench import limits
from clusterbench.report.blocks import card, cards, details, esc, num, pct, section, table
from clusterbench.stages.hardware.records import Hardware
from clusterbench.stages.peaks.records import MatmulPeak, Peaks
from clusterbench.units import human_bytes


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
