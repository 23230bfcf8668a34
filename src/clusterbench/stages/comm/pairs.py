"""The pairwise matrix judged: which pair, rank or node is slow (docs/methodology.md §8).

Pairs fall in two classes, within a node and across nodes, each judged against its own
median. A pair is flagged below `flag_below` x its class's median. A rank or a node is flagged
in one direction (send or receive) when more than half of its pairs in that direction are:
one slow NIC pulls down every pair it sends from, while each of its peers keeps most of
theirs. With two nodes a single pair cannot tell the sender's fault from the receiver's, so
both are named.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from clusterbench.stages.comm.records import PairRow

WITHIN, ACROSS = "within nodes", "across nodes"


@dataclass(frozen=True)
class Flag:
    what: str  # pair, rank or node
    name: str
    direction: str  # send, receive, or "" for a pair
    gbps: float  # the pair's figure, or the median of the flagged one's pairs in that direction
    median: float  # its class's median
    pairs: int  # how many pairs the figure stands on
    klass: str

    @property
    def ratio(self) -> float:
        return self.gbps / self.median if self.median > 0 else 0.0

    def text(self) -> str:
        doing = f" {self.direction}s at" if self.direction else " at"
        over = f" ({self.pairs} pairs)" if self.what != "pair" else ""
        return (f"{self.what} {self.name}{doing} {self.gbps:.3f} Gbps{over}, "
                f"{self.ratio:.2f}x the {self.median:.3f} Gbps median {self.klass}")


def klass(row: PairRow) -> str:
    return WITHIN if row.src_node == row.dst_node else ACROSS


def medians(rows: list[PairRow]) -> dict[str, float]:
    """The median bandwidth of each class."""
    return {k: statistics.median(r.gbps for r in found) for k, found in _by_class(rows).items()}


def latencies(rows: list[PairRow]) -> dict[str, float]:
    """The median latency of each class, in microseconds."""
    return {k: statistics.median(r.latency_us for r in found) for k, found in _by_class(rows).items()}


def _by_class(rows: list[PairRow]) -> dict[str, list[PairRow]]:
    found: dict[str, list[PairRow]] = {}
    for r in rows:
        found.setdefault(klass(r), []).append(r)
    return found


def flags(rows: list[PairRow], flag_below: float) -> list[Flag]:
    """Slow nodes first, then slow ranks their node does not explain, then each slow pair."""
    mid = medians(rows)
    classes = [klass(r) for r in rows]
    slow = {(r.src, r.dst) for r, k in zip(rows, classes) if r.gbps < flag_below * mid[k]}
    # Every grouping in one pass over the rows: a fleet's pairs are millions.
    groups: dict[tuple[str, str], dict[tuple[object, str], list[PairRow]]] = {
        (what, direction): {} for what in ("node", "rank") for direction in ("send", "receive")}
    for r, k in zip(rows, classes):
        for direction, name_node, name_rank in (("send", r.src_node, r.src), ("receive", r.dst_node, r.dst)):
            if k != WITHIN:  # a node's own links are its ranks' business
                groups[("node", direction)].setdefault((name_node, k), []).append(r)
            groups[("rank", direction)].setdefault((name_rank, k), []).append(r)
    found: list[Flag] = []
    nodes_flagged: set[tuple[str, str]] = set()
    for what in ("node", "rank"):
        for direction, end in (("send", "src"), ("receive", "dst")):
            for (name, k), mine in groups[(what, direction)].items():
                node = getattr(mine[0], f"{end}_node")
                bad = sum((r.src, r.dst) in slow for r in mine)
                if 2 * bad <= len(mine) or (what == "rank" and (node, direction) in nodes_flagged):
                    continue
                if what == "node":
                    nodes_flagged.add((node, direction))
                label = node if what == "node" else f"{name} ({node})"
                found.append(Flag(what, label, direction, statistics.median(r.gbps for r in mine), mid[k],
                                  len(mine), k))
    found += [Flag("pair", f"{r.src} -> {r.dst} ({r.src_node} -> {r.dst_node})", "", r.gbps, mid[klass(r)], 1,
                   klass(r)) for r in sorted(rows, key=lambda r: r.gbps) if (r.src, r.dst) in slow]
    return found
