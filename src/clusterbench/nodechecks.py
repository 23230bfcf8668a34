"""What a node is checked for, in one torch-free table (docs/methodology.md §20): `clusterbench check` runs it
on one node within its budget, `clusterbench fleet` on every node at once, and the fleet's bands, a baseline's
bands and the node rules judge what it finds.

An entry says what is true of the check itself: whether it only reads counters (passive) or loads the device
(active); whether it runs once per device, once per node (its first rank), or on all the node's ranks together;
the figures it produces, each more-is-better and judged by the bands of its hardware class, or counts judged by
the node rules (analyse/node_rules.yaml, a rules file a team may replace); and how many figure-times of the
budget it takes. How it is measured lives in fleet/measures.py, one function there per entry here, so reading
a finished run needs only this table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["passive", "active"]
# device: each device, by the rank that owns it (one CPU is one device however many ranks share it);
# node: once, by the node's first rank, seeing every device of the node; ranks: all the node's ranks together.
Scope = Literal["device", "node", "ranks"]


@dataclass(frozen=True)
class NodeCheck:
    name: str  # what `check -v` prints as it runs, and the key of its measure
    kind: Kind
    scope: Scope
    summary: str
    figures: dict[str, str] = field(default_factory=dict)  # metric -> in words, more is better, judged by bands
    counts: tuple[str, ...] = ()  # figures the node rules judge (counters.*), by their metric names
    cost: float = 0.0  # figure-times of a peak measurement it takes per device: how `check` splits its budget
    gpu_only: bool = False  # a CPU node has nothing of it to measure
    votes: bool = False  # produces the numerics task's losses, judged by the vote of its class's devices
    in_fleet: bool = True  # `fleet` runs it (the node-local phase) as well as `check`


COUNTS = ("counters.ecc_uncorrected", "counters.retired_pending", "counters.remap_pending", "counters.remap_failed",
          "counters.pcie_downtrained", "counters.pcie_replays", "counters.nic_errors", "counters.link_flaps",
          "counters.ib_errors", "counters.ib_ports_down", "counters.xid_hardware", "counters.xid_driver",
          "counters.xid_application", "counters.xid_unknown")

NODE_CHECKS: dict[str, NodeCheck] = {
    c.name: c
    for c in (
        NodeCheck("counters", "passive", "node",
                  "the node's error counters and events: ECC and row remaps, PCIe links and replays, NIC and "
                  "InfiniBand errors and link flaps, Xid events of its GPUs", counts=COUNTS),
        NodeCheck("peaks", "active", "device", "dense matmul at full power and a device-memory copy",
                  {"matmul_tflops": "matmul TFLOP/s", "copy_gbps": "memory copy GB/s"}, cost=2.0),
        NodeCheck("host_device", "active", "device",
                  "pinned host-to-device and device-to-host copies, against the GPU's PCIe link",
                  {"h2d_gbps": "host-to-device GB/s", "d2h_gbps": "device-to-host GB/s"}, cost=1.0, gpu_only=True),
        NodeCheck("peer_copies", "active", "node",
                  "copies between every pair of the node's GPUs: the slowest pair of the matrix",
                  {"p2p_min_gbps": "slowest GPU-to-GPU copy GB/s"}, cost=1.0, gpu_only=True, in_fleet=False),
        NodeCheck("intra_all_reduce", "active", "ranks", "an all_reduce among the node's ranks, timed as the "
                  "comm sweep times it", {"intra_busbw_gbps": "intra-node all_reduce busbw Gbps"}),
        NodeCheck("numerics", "active", "device", "the numerics task trained on each device: finite losses, and "
                  "the same bit for bit on devices of one class", votes=True),
    )
}

# Every figure the bands judge, in words: what a fleet's row and a check's line show.
BANDED: dict[str, str] = {metric: words for c in NODE_CHECKS.values() for metric, words in c.figures.items()}
