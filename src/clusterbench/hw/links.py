"""Which link the collectives of a run crossed, and its theoretical bandwidth (REFERENCE.md section 2).

Both the report's theoretical line and `clusterbench run`'s bandwidth verdict use this one answer.
"""

from __future__ import annotations

from typing import Any


def link_line(doc: dict[str, Any]) -> tuple[float | None, str]:
    """(one-direction GB/s per GPU of the link the collectives cross, label), or (None, why not)."""
    env = doc.get("env") or {}
    if env.get("device_type") != "cuda":
        return None, ("The ranks ran on the CPU (gloo over shared memory and loopback): no link table applies, "
                      "so the plots have no theoretical line.")
    gpus = (doc.get("hardware") or {}).get("gpus") or []
    if not gpus:
        return None, "run.json has no hardware picture with GPUs, so the plots have no theoretical line."
    if len(set(env.get("hosts") or [])) > 1:
        ports = [p for p in doc["hardware"].get("rdma") or [] if p.get("gbps") and p.get("state") == "ACTIVE"]
        if not ports:
            return None, "Ranks on several hosts and no active RDMA port known: no theoretical line."
        slowest = min(ports, key=lambda p: p["gbps"])
        return slowest["gbps"], f"{slowest.get('label') or 'RDMA'}: {slowest['gbps']:g} GB/s (one port per GPU)"
    nvlink = [g.get("nvlink_gbps") for g in gpus]
    if all(nvlink):
        slowest = min(gpus, key=lambda g: g["nvlink_gbps"])
        return slowest["nvlink_gbps"], (f"NVLink {slowest['nvlink_version']} × {slowest['nvlink_active']}: "
                                        f"{slowest['nvlink_gbps']:g} GB/s per GPU")
    pcie = [g for g in gpus if g.get("pcie_gbps")]
    if not pcie:
        return None, "Neither NVLink nor PCIe bandwidth is known for these GPUs: no theoretical line."
    slowest = min(pcie, key=lambda g: g["pcie_gbps"])
    return slowest["pcie_gbps"], (f"PCIe gen{slowest['pcie_gen_max']} x{slowest['pcie_width_max']}: "
                                  f"{slowest['pcie_gbps']:g} GB/s")
