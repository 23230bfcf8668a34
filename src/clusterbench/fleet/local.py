"""The node-local phase (docs/methodology.md §16): each node's own figures, every node at once: its
devices' matmul and memory-copy peaks, on a node of several ranks an all_reduce among them, each
device's numerics task, and from its first rank its facts (read from its hardware picture, which stays on
the node: a DGX node's is 31 KB, and rank 0 of 10,000 nodes would hold 300 MB of them)."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

import torch
import torch.distributed as dist

from clusterbench.analyse.fleet import node_class
from clusterbench.devices import device_name, synchronize
from clusterbench.dist import Worker
from clusterbench.fleet import numerics
from clusterbench.hw import peaks
from clusterbench.hw.facts import node_facts
from clusterbench.hw.topology import describe
from clusterbench.results.fleet import NodeProbe, Numerics

# Matmul sizes: a GPU needs 8192 to reach its peak; on a CPU 512 is already compute-bound and keeps a
# fleet of busy hosts quick.
MATMUL_N = {"cuda": 8192, "cpu": 512}
ALL_REDUCE_BYTES = {"cuda": 256 * 1024**2, "cpu": 4 * 1024**2}
ALL_REDUCE_ITERS = 5


@dataclass(frozen=True)
class Part:
    """What one rank sends rank 0 from the node-local phase."""

    rank: int
    node: str
    device: str  # "" where the rank measured no device (a CPU's other ranks)
    figures: dict[str, float]
    losses: list[float]
    picture: Picture | None  # its node's first rank's


@dataclass(frozen=True)
class Picture:
    """What rank 0 needs of a node's hardware picture: its facts, and what its class is named from."""

    facts: dict[str, str]
    cpu: str
    cores: int | None
    gpus: int


def node_groups(nodes: dict[str, list[int]]) -> dict[str, object]:
    """Each node of several ranks, its process group: made by every rank, in one order."""
    return {node: dist.new_group(ranks) for node, ranks in nodes.items() if len(ranks) > 1}


def measure(worker: Worker, nodes: dict[str, list[int]], groups: dict[str, object], seconds: float,
            numerics_steps: int) -> Part | None:
    """This rank's part of the phase for `nodes` (None: its node is not among them)."""
    node = next((n for n, ranks in nodes.items() if worker.rank in ranks), None)
    if node is None:
        return None
    ranks = nodes[node]
    leader = worker.rank == ranks[0]
    # One CPU is one device however many ranks share it: its first rank measures it.
    measures = worker.device.type != "cpu" or leader
    figures = device_figures(worker, seconds) if measures else {}
    if node in groups:
        figures["intra_busbw_gbps"] = intra_busbw(worker, groups[node], len(ranks))
    losses = numerics.losses(worker.device, worker.rank, numerics_steps) if measures and numerics_steps else []
    picture = None
    if leader:
        hardware = describe()
        picture = Picture(node_facts(hardware), hardware.cpu.model or "?", hardware.cpu.logical_cores,
                          len(hardware.gpus))
    return Part(worker.rank, node, device_name(worker.device) if measures else "", figures, losses, picture)


def device_figures(worker: Worker, seconds: float) -> dict[str, float]:
    """This rank's device: matmul TFLOP/s (bf16 on a GPU, float32 on a CPU) and copy GB/s."""
    dev = worker.device
    dtype = "bfloat16" if dev.type == "cuda" else "float32"
    measured = peaks.measure_device(str(dev), device_name(dev), [dtype], MATMUL_N.get(dev.type), seconds)
    return {"matmul_tflops": measured.matmul[0].tflops, "copy_gbps": measured.copy.gbps}


def intra_busbw(worker: Worker, group: object, size: int) -> float:
    """all_reduce bus bandwidth (Gbps) among the `size` ranks of this node's `group`."""
    dev = worker.device
    nbytes = ALL_REDUCE_BYTES.get(dev.type, ALL_REDUCE_BYTES["cpu"])
    data = torch.ones(nbytes // 4, dtype=torch.float32, device=dev)
    dist.all_reduce(data, group=group)  # warm-up: the first call sets up the communicator's buffers
    synchronize(dev)
    start = time.perf_counter()
    for _ in range(ALL_REDUCE_ITERS):
        dist.all_reduce(data, group=group)
    synchronize(dev)
    seconds = (time.perf_counter() - start) / ALL_REDUCE_ITERS
    return nbytes * 8 / seconds / 1e9 * 2 * (size - 1) / size


def assemble(parts: list[Part], nodes: dict[str, list[int]]) -> tuple[list[NodeProbe], list[Numerics]]:
    """Each node's probe (its worst device's figures: a node runs at its slowest device's pace) and each
    device's numerics."""
    by_node: dict[str, list[Part]] = defaultdict(list)
    for m in parts:
        by_node[m.node].append(m)
    probes = []
    for node, ranks in nodes.items():
        mine = by_node.get(node, [])
        picture = next((m.picture for m in mine if m.picture is not None), None)
        if picture is None:
            continue
        devices = [m.device for m in mine if m.device]
        figures: dict[str, float] = {}
        for m in mine:
            for name, value in m.figures.items():
                figures[name] = min(value, figures.get(name, value))
        klass = node_class(devices[0] if devices else picture.cpu, len(devices) if picture.gpus else 0, picture.cores)
        probes.append(NodeProbe(node, list(ranks), picture.facts, klass, figures))
    return probes, [Numerics(m.rank, m.node, m.device, m.losses) for m in parts if m.losses]
