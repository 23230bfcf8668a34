"""The measured peaks' metrics: peaks.matmul.<dtype>.tflops and peaks.copy.gbps."""

from __future__ import annotations

from clusterbench.analyse.metrics import Metrics
from clusterbench.results.schema import Run


def metrics(run: Run, m: Metrics) -> None:
    """peaks.*: across devices their minimum, since the slowest device gates the whole job."""
    if run.peaks is None:
        return
    for p in run.peaks.matmul:
        name = f"peaks.matmul.{p.dtype}.tflops"
        m.put(name, min(m.values.get(name, p.tflops), p.tflops))
    if run.peaks.copy:
        m.put("peaks.copy.gbps", min(c.gbps for c in run.peaks.copy))
