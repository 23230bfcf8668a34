"""The node-local phase (docs/methodology.md §16): each node's own checks (nodechecks.NODE_CHECKS), every node
at once: its counters, its devices' matmul and memory-copy peaks, their host-device copies and the copies between
its GPUs (each alone, in turns), on a node of several ranks an all_reduce among them, each device's numerics task,
and from its first rank its facts (read from its hardware picture, which stays on the node: a DGX node's is 31 KB,
and rank 0 of 10,000 nodes would hold 300 MB of them)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch
import torch.distributed as dist

from clusterbench.hw import counters
from clusterbench.hw.facts import node_facts
from clusterbench.hw.topology import describe
from clusterbench.nodechecks import measures
from clusterbench.nodechecks.bands import node_class
from clusterbench.nodechecks.measures import Found
from clusterbench.nodechecks.table import NODE_CHECKS
from clusterbench.runtime.devices import device_name
from clusterbench.runtime.dist import Worker
from clusterbench.stages.fleet.records import CopyFigure, NodeProbe, Numerics

# The checks measured again, alone, for a node whose figures fell out of its band: those with figures.
BANDED_CHECKS = tuple(c.name for c in NODE_CHECKS.values() if c.figures)


@dataclass(frozen=True)
class Part:
    """What one rank sends rank 0 from the node-local phase."""

    rank: int
    node: str
    device: str  # "" where the rank measured no device (a CPU's other ranks)
    found: Found
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
            numerics_steps: int, checks: tuple[str, ...] | None = None) -> Part | None:
    """This rank's part of the node checks (nodechecks.NODE_CHECKS; of `checks`, when given) for `nodes` (None:
    its node is not among them)."""
    node = next((n for n, ranks in nodes.items() if worker.rank in ranks), None)
    if node is None:
        return None
    ranks = nodes[node]
    leader = worker.rank == ranks[0]
    # One CPU is one device however many ranks share it: its first rank measures it.
    owns_device = worker.device.type != "cpu" or leader
    dev = worker.device
    seen = tuple(torch.device("cuda", i) for i in range(torch.cuda.device_count())) if dev.type == "cuda" else ()
    on = measures.On(dev, device_name(dev), seconds, worker.rank, numerics_steps, groups.get(node), len(ranks),
                     ranks.index(worker.rank), seen if leader else (),
                     tuple(counters.node_gpus()) if leader else ())
    scopes = {"ranks"} | ({"device"} if owns_device else set()) | ({"node"} if leader else set())
    found = measures.run_checks(on, scopes, checks)
    picture = None
    if leader and checks is None:
        hardware = describe()
        picture = Picture(node_facts(hardware), hardware.cpu.model or "?", hardware.cpu.logical_cores,
                          len(hardware.gpus))
    return Part(worker.rank, node, device_name(dev) if owns_device else "", found, picture)


def assemble(parts: list[Part], nodes: dict[str, list[int]]) -> tuple[list[NodeProbe], list[Numerics]]:
    """Each node's probe (its worst device's figures: a node runs at its slowest device's pace) and each
    device's numerics."""
    by_node = _by_node(parts)
    probes = []
    for node, ranks in nodes.items():
        mine = by_node.get(node, [])
        picture = next((m.picture for m in mine if m.picture is not None), None)
        if picture is None:
            continue
        devices = [m.device for m in mine if m.device]
        found = _worst(mine)
        klass = node_class(devices[0] if devices else picture.cpu, len(devices) if picture.gpus else 0, picture.cores)
        probes.append(NodeProbe(node, list(ranks), picture.facts, klass, found.figures, found.counts, found.findings,
                                found.copies))
    return probes, [Numerics(m.rank, m.node, m.device, m.found.losses) for m in parts if m.found.losses]


def rechecked(parts: list[Part]) -> dict[str, dict[str, float]]:
    """Each node's figures measured again alone (its worst device's), from the parts of a recheck."""
    return {node: _worst(mine).figures for node, mine in _by_node(parts).items()}


def _by_node(parts: list[Part]) -> dict[str, list[Part]]:
    found: dict[str, list[Part]] = defaultdict(list)
    for m in parts:
        found[m.node].append(m)
    return found


def _worst(parts: list[Part]) -> measures.Found:
    """A node's figures (its worst device's: a node runs at its slowest device's pace), its counts added up, its
    findings, and of each copy figure its worst device's or pair's."""
    node = Found()
    copies: dict[str, CopyFigure] = {}
    for m in parts:
        for name, value in m.found.figures.items():
            node.figures[name] = min(value, node.figures.get(name, value))
        for name, value in m.found.counts.items():
            node.counts[name] = node.counts.get(name, 0.0) + value
        node.findings += m.found.findings
        for c in m.found.copies:
            if c.metric not in copies or c.gbps < copies[c.metric].gbps:
                copies[c.metric] = c
    node.copies = list(copies.values())
    return node
