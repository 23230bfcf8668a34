"""What a node is checked for, in one torch-free table (docs/methodology.md §20): `clusterbench check` runs it
on one node within its budget, `clusterbench fleet` on every node at once, and the fleet's bands, a baseline's
bands and the node rules judge what it finds; `clusterbench burnin` soaks a device with the sizes of its
`peaks` and `intra_all_reduce` entries.

An entry is all there is to a check: whether it only reads counters (passive) or loads the device (active), which
`check -v` says as it starts it; whether it runs once per device, once per node (its first rank), or on all the
node's ranks together; the function that measures it (`module:function`, loaded where it runs, so that this table
stays free of torch); the figures it produces, each more-is-better and judged by the bands of its hardware class;
the counts the node rules judge (nodechecks/node_rules.yaml, a rules file a team may replace, whose rules must name
counts of this table); how many figure-times of the budget it takes; and whether the node's other devices must
be idle while it measures. Adding a check is one entry here and, where it gives counts, one rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["passive", "active"]
# device: each device, by the rank that owns it (one CPU is one device however many ranks share it);
# node: once, by the node's first rank, seeing every device of the node; ranks: all the node's ranks together.
Scope = Literal["device", "node", "ranks"]
_MEASURES = "clusterbench.nodechecks.measures"


@dataclass(frozen=True)
class NodeCheck:
    name: str  # what `check -v` prints as it runs it
    kind: Kind
    scope: Scope
    summary: str  # what it measures, in a line: `check -v` prints it
    measure: str  # "module:function", a function of nodechecks.measures.On returning nodechecks.measures.Found
    figures: dict[str, str] = field(default_factory=dict)  # metric -> in words, more is better, judged by bands
    counts: tuple[str, ...] = ()  # what the node rules judge, by metric name: a rule naming another is refused
    cost: float = 0.0  # figure-times of a peak measurement it takes per device: how `check` splits its budget
    gpu_only: bool = False  # a CPU node has nothing of it to measure
    votes: bool = False  # produces the numerics task's losses, judged by the vote of its class's devices
    # The node's other devices idle while it measures (a shared PCIe switch, the host's memory or an NVLink would
    # otherwise set its figure): in `fleet` the node's ranks take turns, as `check` measures one device at a time.
    alone: bool = False
    sizes: dict[str, int] = field(default_factory=dict)  # by device type ("cuda", "cpu"): its problem size

    def size(self, device_type: str) -> int:
        """Its problem size on a device of this type: a GPU's wherever a type other than the CPU is named."""
        return self.sizes["cpu"] if device_type == "cpu" else self.sizes["cuda"]


# The dtype of the matmul of `peaks` and of the burn-in: a GPU's tensor cores run bfloat16, a CPU float32.
MATMUL_DTYPE = {"cuda": "bfloat16", "cpu": "float32"}
MIB = 1024**2

NODE_CHECKS: dict[str, NodeCheck] = {
    c.name: c
    for c in (
        NodeCheck("counters", "passive", "node",
                  "the node's error counters and events: ECC and row remaps, PCIe links and replays, NIC and "
                  "InfiniBand errors and link flaps, recent Xid events of its GPUs", f"{_MEASURES}:node_counters",
                  counts=("counters.ecc_uncorrected", "counters.retired_pending", "counters.remap_pending",
                          "counters.remap_failed", "counters.pcie_downtrained", "counters.pcie_replays",
                          "counters.nic_errors", "counters.link_flaps", "counters.ib_errors",
                          "counters.ib_ports_down", "counters.xid_critical", "counters.xid_warning",
                          "counters.xid_info")),
        # A GPU needs 8192 to reach its peak; on a CPU 512 is already compute-bound and keeps busy hosts quick.
        NodeCheck("peaks", "active", "device", "dense matmul at full power and a device-memory copy",
                  f"{_MEASURES}:device_peaks", {"matmul_tflops": "matmul TFLOP/s", "copy_gbps": "memory copy GB/s"},
                  cost=2.0, sizes={"cuda": 8192, "cpu": 512}),
        # 256 MiB: large enough for a PCIe or NVLink link's full rate.
        NodeCheck("host_device", "active", "device",
                  "pinned host-to-device and device-to-host copies, each GPU alone, against its PCIe link; the "
                  "link's generation read while they run", f"{_MEASURES}:host_device",
                  {"h2d_gbps": "host-to-device GB/s", "d2h_gbps": "device-to-host GB/s"},
                  ("counters.pcie_gen_drop",), cost=1.0, gpu_only=True, alone=True, sizes={"cuda": 256 * MIB}),
        NodeCheck("peer_copies", "active", "node",
                  "copies between every ordered pair of the node's GPUs, against NVLink or PCIe: the slowest pair",
                  f"{_MEASURES}:peer_copies", {"p2p_min_gbps": "slowest GPU-to-GPU copy GB/s"}, cost=1.0,
                  gpu_only=True, alone=True, sizes={"cuda": 256 * MIB}),
        NodeCheck("intra_all_reduce", "active", "ranks", "an all_reduce among the node's ranks, timed as the "
                  "comm sweep times it", f"{_MEASURES}:intra_all_reduce",
                  {"intra_busbw_gbps": "intra-node all_reduce busbw Gbps"}, sizes={"cuda": 256 * MIB, "cpu": 4 * MIB}),
        NodeCheck("numerics", "active", "device", "the numerics task trained on each device: finite losses, and "
                  "the same bit for bit on devices of one class", f"{_MEASURES}:numerics_task", votes=True),
    )
}


# Every figure the bands judge, in words: what a fleet's row and a check's line show.
BANDED: dict[str, str] = {metric: words for c in NODE_CHECKS.values() for metric, words in c.figures.items()}


def counted() -> tuple[str, ...]:
    """Every count the node rules may judge, of the table as it stands (a check added since included)."""
    return tuple(dict.fromkeys(name for c in NODE_CHECKS.values() for name in c.counts))


# --node-rules, as `check`, `fleet` and `burnin` take it.
NODE_RULES_HELP = ("judge the node's error counters and events by these rules (the form of `run --rules`, each on a "
                   "count of the node checks)")
