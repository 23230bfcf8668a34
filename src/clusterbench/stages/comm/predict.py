"""What the alpha-beta model predicts for a described cluster, per algorithm (docs/methodology.md §14).

Each algorithm is a count of latency steps and of bytes per rank on a link, paid at the link
class's alpha (µs per step) and bandwidth. A flat algorithm over ranks of several nodes moves in
lock-step, so it pays the slowest link of the job at every step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from clusterbench import limits
from clusterbench.collectives import COLLECTIVES
from clusterbench.errors import UsageError
from clusterbench.stages.comm.records import CostModel

# Per-step latencies of named link classes. NVLink: NCCL's own tuning table (src/graph/tuning.cc, hwLat,
# NVLink ring with the Simple protocol: 3.4 µs). Networks: an assumption of 8 µs per step (verbs latency
# of 1-2 µs plus the proxy thread and a chunk's pipeline fill); calibrate it with a fit of your own.
NVLINK_ALPHA_US = 3.4
NETWORK_ALPHA_US = 8.0


@dataclass(frozen=True)
class Link:
    name: str
    alpha_us: float  # per step
    bandwidth_gb_s: float  # one direction, per rank

    @property
    def beta(self) -> float:
        """µs per byte (1 GB/s = 1e3 bytes per µs)."""
        return 1e-3 / self.bandwidth_gb_s


def named_links() -> dict[str, Link]:
    """The link classes --intra and --inter accept, from the bandwidth tables of clusterbench.limits."""
    links = {f"nvlink{g}": Link(f"NVLink {g} ({gen.example_gpus})", NVLINK_ALPHA_US, gen.per_gpu_gbps)
             for g, gen in limits.NVLINK.items()}
    links |= {name.lower(): Link(f"InfiniBand {name}", NETWORK_ALPHA_US, gbit / 8)
              for name, gbit in limits.INFINIBAND_GBIT.items()}
    return links


def named_link(name: str) -> Link:
    table = named_links()
    if name.lower() not in table:
        raise UsageError(f"unknown link class {name!r}: choose one of {', '.join(table)}")
    return table[name.lower()]


def measured_links(model: CostModel) -> dict[str, Link]:
    return {p.link: Link(f"{p.link}-node as measured ({p.source})", p.alpha_us, p.bandwidth_gb_s)
            for p in model.links}


@dataclass(frozen=True)
class Cluster:
    nodes: int
    gpus_per_node: int
    intra: Link
    inter: Link | None  # needed when nodes > 1

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise UsageError(f"a cluster needs at least one node of one rank, not {self.nodes} x {self.gpus_per_node}")
        if self.nodes > 1 and self.inter is None:
            raise UsageError(f"{self.nodes} nodes need an inter-node link class: give --inter CLASS "
                             f"(one of {', '.join(named_links())}) or a run measured on several nodes")

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def slowest(self) -> tuple[float, float]:
        """(alpha, beta) of the job's slowest link: a flat algorithm waits for it at every step."""
        links = [self.intra] + ([self.inter] if self.nodes > 1 and self.inter else [])
        return max(x.alpha_us for x in links), max(x.beta for x in links)


def _ring_all_reduce(c: Cluster, s: float) -> float:
    p, (a, b) = c.ranks, c.slowest
    return 2 * (p - 1) * a + 2 * (p - 1) / p * s * b


def _tree_all_reduce(c: Cluster, s: float) -> float:
    # Double binary tree, pipelined: up and down a tree of depth log2 p; each tree carries half of S,
    # and a rank sends and receives both halves once each way: 2 S on its link.
    p, (a, b) = c.ranks, c.slowest
    return 2 * math.ceil(math.log2(p)) * a + 2 * s * b if p > 1 else 0.0


def _hierarchical_all_reduce(c: Cluster, s: float) -> float:
    g, n = c.gpus_per_node, c.nodes
    intra = 2 * ((g - 1) * c.intra.alpha_us + (g - 1) / g * s * c.intra.beta)  # reduce-scatter + all-gather
    if n == 1 or c.inter is None:
        return intra
    # G concurrent rings across nodes, one per local rank, each on its S/G shard
    return intra + 2 * (n - 1) * c.inter.alpha_us + 2 * (n - 1) / n * (s / g) * c.inter.beta


def _ring_one_pass(c: Cluster, s: float) -> float:
    p, (a, b) = c.ranks, c.slowest
    return (p - 1) * a + (p - 1) / p * s * b


ALGORITHMS: dict[str, dict[str, Callable[[Cluster, float], float]]] = {
    "all_reduce": {"ring": _ring_all_reduce, "tree": _tree_all_reduce, "hierarchical": _hierarchical_all_reduce},
    "all_gather": {"ring": _ring_one_pass},
    "reduce_scatter": {"ring": _ring_one_pass},
    "all_to_all": {"pairwise": _ring_one_pass},
}


@dataclass(frozen=True)
class Point:
    algorithm: str
    time_us: float
    algbw_gb_s: float
    busbw_gb_s: float


@dataclass(frozen=True)
class Prediction:
    size_bytes: int
    points: tuple[Point, ...]

    @property
    def winner(self) -> Point:
        return min(self.points, key=lambda p: p.time_us)


def predict(cluster: Cluster, op: str, sizes: Sequence[int]) -> list[Prediction]:
    if op not in ALGORITHMS:
        raise UsageError(f"no model for {op!r}: choose one of {', '.join(ALGORITHMS)}")
    if cluster.ranks < 2:  # its time is 0 and its bandwidth 0 / 0
        raise UsageError(f"a collective of one rank moves nothing: a cluster of {cluster.nodes} node x "
                         f"{cluster.gpus_per_node} rank has nothing to predict")
    factor = COLLECTIVES[op].busbw_factor(cluster.ranks)
    out = []
    for s in sizes:
        points = []
        for name, time in ALGORITHMS[op].items():
            t = time(cluster, s)
            algbw = s / t * 1e-3 if t > 0 else math.inf  # bytes per µs -> GB/s
            points.append(Point(name, t, algbw, algbw * factor))
        out.append(Prediction(s, tuple(points)))
    return out


def powers_of_two(low: int, high: int) -> list[int]:
    """Powers of two from low to high (both rounded to one)."""
    if low < 1 or high < low:
        raise UsageError(f"sizes {low}..{high}: need 1 <= low <= high")
    first, last = math.ceil(math.log2(low)), math.floor(math.log2(high))
    return [2**k for k in range(first, last + 1)] or [low]
