"""The fleet's pair bars and its suspect nodes, learned together by explaining away (docs/methodology.md §16).

A pair is slow when its bandwidth is below `bar` x the median pair, or its latency above LATENCY_BAR x the
median latency. The node with the most slow pairs in one direction, where they are most of that
direction's pairs (two at least), is a suspect; its pairs are set aside, the medians taken again over the
rest, and the slow pairs counted again without it, until no node is left so. Of nodes with as many slow pairs, the one
whose slow pairs run most nearly at one pace goes first: a node's own fault holds all its pairs to its
pace (stages/fleet/retests.py), while a node slowed by others' faults and a busy moment is slow at as many
paces as causes; then the first by name. A node slow only with suspects is explained by them: a node
held to a tenth of a CPU slows every partner's latency, and those partners are not suspects for it. Two bad nodes of five touch 11 of the 20 pairs, so the median of every
pair is one of theirs. The medians are learned again only while a majority of the nodes is left to set
them; suspects found beyond that are judged by the last bars.

Near-linear in the pairs: each pair is set aside once, the medians come from KeptMedian, a change of the
bars recounts only the pairs whose figure lies between the old bar and the new, and the worst node comes
from a heap whose stale entries are skipped.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass

from clusterbench.stages.comm.records import PairRow
from clusterbench.stages.fleet.kept_median import KeptMedian

LATENCY_BAR = 3.0  # ClusterKit's 2.1 x the lowest, taken against the median to stand a shared host's noise
WAYS = ("send", "receive")


@dataclass(frozen=True)
class Bars:
    """The fleet's pair figures and what counts as slow against them."""

    gbps: float  # the median pair's bandwidth
    latency_us: float
    bar: float

    def slow(self, gbps: float, latency_us: float) -> bool:
        return gbps < self.bar * self.gbps or latency_us > LATENCY_BAR * self.latency_us

    def why(self, gbps: float, latency_us: float) -> str:
        if gbps < self.bar * self.gbps:
            return f"{gbps:.3g} Gbps, {gbps / self.gbps:.2f}x the healthy pairs' median {self.gbps:.3g} Gbps"
        return f"{latency_us:.3g} us latency, {latency_us / self.latency_us:.1f}x the median {self.latency_us:.3g} us"


def end(row: PairRow, way: str) -> str:
    """The node whose `way` the row is: its sender's send, its receiver's receive."""
    return row.src_node if way == "send" else row.dst_node


def other_end(row: PairRow, node: str) -> str:
    return row.dst_node if row.src_node == node else row.src_node


class _Tally:
    """Each (node, way)'s kept pairs and the slow ones among them; those qualifying with the most, from a heap."""

    def __init__(self) -> None:
        self.total: dict[tuple[str, str], int] = defaultdict(int)
        self.slow: dict[tuple[str, str], int] = defaultdict(int)
        self._version: dict[tuple[str, str], int] = defaultdict(int)
        self._heap: list[tuple[int, str, str, int]] = []

    def add(self, key: tuple[str, str], total: int, slow: int) -> None:
        self.total[key] += total
        self.slow[key] += slow
        self._version[key] += 1
        heapq.heappush(self._heap, (-self.slow[key], key[0], key[1], self._version[key]))

    def _top(self) -> tuple[str, str] | None:
        """The current qualifying entry on top of the heap (most slow pairs, then node and way by name), left
        there; an entry that no longer qualifies is dropped: it is pushed again whenever its counts change,
        the only way it can qualify again."""
        while self._heap:
            _, node, way, version = self._heap[0]
            key = (node, way)
            slow = self.slow[key]
            if version == self._version[key] and slow >= 2 and 2 * slow > self.total[key]:
                return key
            heapq.heappop(self._heap)
        return None

    def most(self) -> list[tuple[str, str]]:
        """Every (node, way) with the most slow pairs, where they are most of that way's pairs and two at least."""
        tied: list[tuple[int, str, str, int]] = []
        while (key := self._top()) is not None and (not tied or self.slow[key] == -tied[0][0]):
            tied.append(heapq.heappop(self._heap))
        for entry in tied:
            heapq.heappush(self._heap, entry)
        return [(node, way) for _, node, way, _ in tied]


def learn(rows: list[PairRow], bar: float) -> tuple[Bars, dict[str, str]]:
    """The bars and the suspects of `rows` (at least one): suspects worst first, each with the direction
    its slow pairs ran (send, receive)."""
    nodes = {r.src_node for r in rows} | {r.dst_node for r in rows}
    gbps = KeptMedian([r.gbps for r in rows])
    latency = KeptMedian([r.latency_us for r in rows])
    b = Bars(gbps.median(), latency.median(), bar)
    slow = [b.slow(r.gbps, r.latency_us) for r in rows]
    kept = [True] * len(rows)
    touching: dict[str, list[int]] = defaultdict(list)
    tally = _Tally()
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for i, r in enumerate(rows):
        touching[r.src_node].append(i)
        touching[r.dst_node].append(i)
        for way in WAYS:
            c = counts[(end(r, way), way)]
            c[0] += 1
            c[1] += slow[i]
    for key, (total, found) in counts.items():
        tally.add(key, total, found)

    def evenness(key: tuple[str, str]) -> float:
        """How far apart the slow pairs of a (node, way) run: fastest / slowest, 1 for one pace."""
        node, way = key
        paces = [rows[i].gbps for i in touching[node] if kept[i] and slow[i] and end(rows[i], way) == node]
        return max(paces) / min(paces)

    suspects: dict[str, str] = {}
    while tied := tally.most():
        node, suspects[node] = min(tied, key=lambda key: (evenness(key), key)) if len(tied) > 1 else tied[0]
        for i in touching[node]:
            if kept[i]:
                kept[i] = False
                gbps.drop(i)
                latency.drop(i)
                for way in WAYS:
                    tally.add((end(rows[i], way), way), -1, -slow[i])
        if 2 * len(suspects) < len(nodes) and gbps.kept:
            was, b = b, Bars(gbps.median(), latency.median(), bar)
            for i in _crossed(gbps, latency, was, b):
                if kept[i] and (now := b.slow(rows[i].gbps, rows[i].latency_us)) != slow[i]:
                    slow[i] = now
                    for way in WAYS:
                        tally.add((end(rows[i], way), way), 0, 1 if now else -1)
    return b, suspects


def _crossed(gbps: KeptMedian, latency: KeptMedian, was: Bars, now: Bars) -> set[int]:
    """The pairs whose slowness the change of bars may change: a figure between the old bar and the new."""
    low, high = sorted((was.bar * was.gbps, now.bar * now.gbps))
    found = set(gbps.indexes_from(low, high))
    low, high = sorted((LATENCY_BAR * was.latency_us, LATENCY_BAR * now.latency_us))
    return found | set(latency.indexes_from(low, high, above=True))
