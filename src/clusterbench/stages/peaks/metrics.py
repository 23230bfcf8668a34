"""The measured peaks' metrics: peaks.matmul.<dtype>.tflops and peaks.copy.gbps."""

from __future__ import annotations

import math

from clusterbench.analyse.metrics import Metrics
from clusterbench.results.run import Run
from clusterbench.stages.peaks.records import PEAKS


def metrics(run: Run, m: Metrics) -> None:
    """peaks.*: across devices their minimum, since the slowest device gates the whole job; a device
    that measured nothing (NaN) leaves the minimum unknown rather than dropping out of it."""
    if PEAKS.of(run) is None:
        return
    by_name: dict[str, list[float]] = {}
    for p in PEAKS.of(run).matmul:
        by_name.setdefault(f"peaks.matmul.{p.dtype}.tflops", []).append(p.tflops)
    if PEAKS.of(run).copy:
        by_name["peaks.copy.gbps"] = [c.gbps for c in PEAKS.of(run).copy]
    for name, values in by_name.items():
        m.put(name, min(values) if all(math.isfinite(v) for v in values) else math.nan)
