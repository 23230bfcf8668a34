"""Which link the collectives of a run crossed, and its theoretical bandwidth (docs/methodology.md §2).

The report's theoretical line and the bandwidth verdict use this one answer.
"""

from __future__ import annotations

from clusterbench.collectives import COLLECTIVES
from clusterbench.results.run import Run
from clusterbench.stages.comm.records import CommRow
from clusterbench.stages.hardware.records import HARDWARE, Hardware, RdmaPort
from clusterbench.units import BITS_PER_BYTE


def active_rdma(hardware: Hardware | None) -> list[RdmaPort]:
    """The InfiniBand/RoCE ports that are up on the host the picture was taken on."""
    return [p for p in (hardware.rdma if hardware else []) if p.state == "ACTIVE"]


def link_line(run: Run) -> tuple[float | None, str]:
    """(one-direction GB/s per GPU of the link the collectives cross, label), or (None, why not)."""
    if run.env.device_type != "cuda":
        return None, ("the ranks ran on the CPU (gloo over shared memory and loopback): no link table applies, "
                      "so there is no theoretical line")
    gpus = HARDWARE.of(run).gpus if HARDWARE.of(run) else []
    if not gpus:
        return None, "run.json has no hardware picture with GPUs, so there is no theoretical line"
    if len(set(run.env.hosts)) > 1:
        ports = [p for p in active_rdma(HARDWARE.of(run)) if p.gbps]
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


def node_traffic(row: CommRow) -> tuple[float, float] | None:
    """Gbps each node sent into the network during `row` (docs/methodology.md §8): as a flat ring
    moves it (every node boundary carries busbw), and the least any algorithm must move
    (busbw x (k-1)/(n-1) x n/k, for k nodes of n ranks). None within one node or for other ops."""
    k, n = row.nodes, row.world_size
    facts = COLLECTIVES.get(row.op)
    if k < 2 or n < 2 or facts is None or not facts.crosses_every_node:
        return None
    return row.busbw_gbps, row.busbw_gbps * (k - 1) / (n - 1) * n / k


def ports(hardware: Hardware | None) -> list[tuple[float, str]]:
    """(Gbps, name) of the active network ports of the host the picture was taken on: its RDMA
    ports, else its physical Ethernet NICs, else (a container, a namespace) its virtual ones."""
    if hardware is None:
        return []
    rdma = [(p.gbps * BITS_PER_BYTE, f"{p.device}/{p.port}") for p in active_rdma(hardware) if p.gbps]
    nics = [n for n in hardware.net if n.gbps and n.operstate == "up" and not n.name.startswith("lo")]
    physical = [(n.gbps * BITS_PER_BYTE, n.name) for n in nics if not n.virtual]
    return rdma or physical or [(n.gbps * BITS_PER_BYTE, n.name) for n in nics]


def network_line(row: CommRow, hardware: Hardware | None) -> str:
    """What one measurement across nodes asked of each node's network, against its ports: all of
    them for the whole job's traffic, one for a rail's (one rank per node)."""
    traffic = node_traffic(row)
    if traffic is None:
        return ""
    ring, least = traffic
    line = (f"# network: {row.op} at {row.size_bytes} B over {row.nodes} nodes x {row.world_size} ranks: "
            f"each node sent {ring:.3f} Gbps as a ring, at least {least:.3f} Gbps by any algorithm")
    found = ports(hardware)
    if not found:
        return line
    if row.world_size == row.nodes:
        rate, name = max(found)
        return line + f"; rank 0's fastest port {name} runs at {rate:g} Gbps ({ring / rate:.0%} as a ring)"
    total = sum(rate for rate, _ in found)
    names = ", ".join(name for _, name in found)
    return line + f"; rank 0's {len(found)} port(s) ({names}) run at {total:g} Gbps together ({ring / total:.0%})"
