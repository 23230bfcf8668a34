"""The hardware picture's metrics: hardware.* (docs/methodology.md §6, §12)."""

from __future__ import annotations

from clusterbench.analyse.metrics import Metrics
from clusterbench.results.run import Run
from clusterbench.stages.hardware.records import HARDWARE


def metrics(run: Run, m: Metrics) -> None:
    """hardware.*: the PCIe links under load, and where each rank runs against its GPU."""
    _pcie(run, m)
    _affinity(run, m)


def _pcie(run: Run, m: Metrics) -> None:
    gpus = HARDWARE.of(run).gpus if HARDWARE.of(run) else []
    if not gpus:
        m.absent["hardware.pcie.downtrained"] = "no GPU"
    elif not all(g.pcie.under_load for g in gpus):
        m.absent["hardware.pcie.downtrained"] = "the links were read while the GPUs were idle"
    else:
        slow = [str(g.index) for g in gpus if g.pcie.downtrained]
        m.put("hardware.pcie.downtrained", len(slow),
              f"GPU {', '.join(slow)} ran below the link's max generation or width under load" if slow
              else f"{len(gpus)} GPUs at their link's generation and width under load")


def _affinity(run: Run, m: Metrics) -> None:
    """Ranks whose CPUs all sit on another NUMA node than their GPU (docs/methodology.md §12)."""
    placed = [p for p in run.env.ranks if p.device_numa is not None and p.cpu_numa]
    if not placed:
        m.absent["hardware.affinity.far_from_gpu"] = (
            "no rank's GPU has a known NUMA node" if run.env.device_type == "cuda"
            else "the ranks ran on CPUs: there is no GPU to place them near")
        return
    far = [p for p in placed if p.device_numa not in p.cpu_numa]
    loose = [p for p in placed if p.device_numa in p.cpu_numa and len(p.cpu_numa) > 1]
    if far:
        p = far[0]
        note = (f"{len(far)} of {len(placed)} ranks may run only on CPUs of another NUMA node than their GPU, "
                f"e.g. rank {p.rank} on {p.node} ({p.device}, NUMA {p.device_numa}) on CPUs {p.cpus} (NUMA "
                f"{', '.join(map(str, p.cpu_numa))}): every copy to and from the GPU crosses the link between NUMA "
                "nodes")
    elif loose:
        note = (f"{len(loose)} of {len(placed)} ranks are not pinned near their GPU (their CPUs span NUMA nodes "
                f"{', '.join(map(str, loose[0].cpu_numa))}); pinning each to its GPU's node avoids the link between "
                "NUMA nodes")
    else:
        note = f"all {len(placed)} ranks run on their GPU's NUMA node"
    m.put("hardware.affinity.far_from_gpu", len(far), note)
