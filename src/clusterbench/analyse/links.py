"""Which link the collectives of a run crossed, and its theoretical bandwidth (docs/methodology.md §2).

The report's theoretical line and the bandwidth verdict use this one answer.
"""

from __future__ import annotations

from clusterbench.results.schema import Run


def link_line(run: Run) -> tuple[float | None, str]:
    """(one-direction GB/s per GPU of the link the collectives cross, label), or (None, why not)."""
    if run.env.device_type != "cuda":
        return None, ("the ranks ran on the CPU (gloo over shared memory and loopback): no link table applies, "
                      "so there is no theoretical line")
    gpus = run.hardware.gpus if run.hardware else []
    if not gpus:
        return None, "run.json has no hardware picture with GPUs, so there is no theoretical line"
    if len(set(run.env.hosts)) > 1:
        ports = [p for p in run.hardware.rdma if p.gbps and p.state == "ACTIVE"]
        if not ports:
            return None, "ranks on several hosts and no active RDMA port known: no theoretical line"
        slowest = min(ports, key=lambda p: p.gbps)
        return slowest.gbps, f"{slowest.label or 'RDMA'}: {slowest.gbps:g} GB/s (one port per GPU)"
    if all(g.nvlink_gbps for g in gpus):
        slowest = min(gpus, key=lambda g: g.nvlink_gbps)
        return slowest.nvlink_gbps, (f"NVLink {slowest.nvlink_version} × {slowest.nvlink_active}: "
                                     f"{slowest.nvlink_gbps:g} GB/s per GPU")
    pcie = [g for g in gpus if g.pcie.gbps]
    if not pcie:
        return None, "neither NVLink nor PCIe bandwidth is known for these GPUs: no theoretical line"
    slowest = min(pcie, key=lambda g: g.pcie.gbps)
    return slowest.pcie.gbps, f"PCIe gen{slowest.pcie.gen_max} x{slowest.pcie.width_max}: {slowest.pcie.gbps:g} GB/s"
