"""Which links between nodes to measure again, and what the second look proves (docs/methodology.md §16).

The rounds measure pairs of nodes, many pairs at a time, each figure the median of its messages; the
bars and the suspects are learned from them (stages/fleet/suspects.py), and every node that is not a suspect
is a healthy partner. The retests measure each suspect against two healthy partners (those it was slow
with first, the least loaded of them, so that many suspects' retests share rounds and no node carries
them all), and every other slow pair once more, each keeping its fastest message and round trip, and a
pair still slow a second time a second later, each way keeping the faster look (stages/fleet/links.py): noise
only ever slows a link, so a link that never reaches the bar in all its messages is slow, and one that
reaches it once can. Then:
- a suspect slow again, the way it was slow (its sends or its receives), against at least two
  different healthy partners is condemned: one slow partner could be that partner's fault, two
  cannot (NVIDIA ClusterKit retests bad pairs alike), and noise picks no direction;
- a suspect slow again against one is a suspect still; against none, it is cleared, and its slow
  pairs are flaky; never measured again (a run cut short), it stays a suspect;
- a pair slow in its round and normal on retest is flaky: reported, nobody excluded;
- a pair slow twice whose nodes are otherwise fine is a bad link, to be looked at, not a bad node.
A suspect's own fault holds its pairs' bandwidth to about one pace (a NIC's cap, a starved CPU's
share), so a pair of it more than FAR x below that pace, the same way, has a fault of its own, which
the suspect does not explain (unexplained()): it is measured again and judged as a link, whatever
the suspect's verdict, and its slow retest is no proof against the suspect while still far below it.
A fault picks a direction, too: a slow pair on the side of a suspect that is otherwise normal (into a
node whose sends are slow and whose receives are not) is none of the suspect's doing (other_side()),
and is measured again and judged as a link like any other.
With two nodes no partner can break the tie: both are named suspects and neither is condemned.

Every step is near-linear in the pairs and retests: they are indexed by node and by way once.
"""

from __future__ import annotations

import bisect
import heapq
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

from clusterbench.stages.comm.records import PairRow
from clusterbench.stages.fleet.records import Retest
from clusterbench.stages.fleet.suspects import WAYS, Bars, end, learn, other_end

PARTNERS = 2  # healthy partners a suspect is retested against; condemned when slow against this many
# Measured on the namespace fleets: a node starved by the host ran its pairs at 1.9-2.7 Gbps (1.4x apart), a node
# capped at 200 Mbit/s at 0.19 Gbps, 0.085 into a starved receiver (2.2x); a 200 Mbit/s link into the starved node
# ran 10-14x below its pace. 4x parts the two with room either way.
FAR = 4.0


class Planned(NamedTuple):
    """A pair of nodes to measure again, and why."""

    a: str
    b: str
    why: str
    suspect: str = ""  # the suspect `b` is a healthy partner of; "" for a link measured again for its own sake


@dataclass
class Verdicts:
    condemned: dict[str, list[str]] = field(default_factory=dict)  # node -> reasons
    suspects: dict[str, str] = field(default_factory=dict)  # node -> why it is not proven either way
    flaky: list[str] = field(default_factory=list)
    bad_links: list[str] = field(default_factory=list)
    bars: Bars | None = None  # what the pairs were judged by; None without pairs
    ways: dict[str, str] = field(default_factory=dict)  # each suspect of the rounds -> the way it was slow


class _SlowPairs:
    """The slow pairs of the rounds, in their order, and by node; each node's pairs per way; and the ways in which
    nodes are mostly slow, counting only the pairs of two nodes that are not suspects."""

    def __init__(self, rows: list[PairRow], b: Bars, suspects: dict[str, str]) -> None:
        self.rows = [r for r in rows if b.slow(r.gbps, r.latency_us)]
        self.of: dict[str, list[PairRow]] = defaultdict(list)
        for r in self.rows:
            self.of[r.src_node].append(r)
            self.of[r.dst_node].append(r)
        self.ways: dict[tuple[str, str], int] = defaultdict(int)  # (node, way) -> its pairs that way
        among: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])  # pairs, slow ones: no suspect in them
        for r in rows:
            slow = b.slow(r.gbps, r.latency_us)
            for way in WAYS:
                self.ways[(end(r, way), way)] += 1
                if r.src_node not in suspects and r.dst_node not in suspects:
                    count = among[(end(r, way), way)]
                    count[0] += 1
                    count[1] += slow
        self._slow_ways = {key for key, (total, slow) in among.items() if 2 * slow > total}

    def clean(self, node: str, way: str) -> bool:
        """Whether `node`'s pairs `way` (its sends or receives) with nodes that are not suspects are mostly normal,
        or it has none: a partner slow that way itself cannot prove anyone slow through it, and its pairs with
        suspects are theirs to explain."""
        return (node, way) not in self._slow_ways


def plan(rows: list[PairRow], nodes: list[str], b: Bars, suspects: dict[str, str]) -> list[Planned]:
    """The pairs of nodes to measure again, each once, with why, from what learn() found in `rows`."""
    slow = _SlowPairs(rows, b, suspects)
    chosen: dict[frozenset[str], Planned] = {}
    for x, partners in _partners(slow, nodes, suspects).items():
        for p in partners:
            chosen.setdefault(frozenset((x, p)), Planned(x, p, f"suspect {x} against healthy {p}", x))
    for r, x, _ in unexplained(slow, suspects, b):
        chosen.setdefault(frozenset((r.src_node, r.dst_node)),
                          Planned(r.src_node, r.dst_node, f"slow in round {r.round}, far slower than {x}'s other "
                                                          "slow pairs"))
    for r, x, side in other_side(slow, suspects):
        chosen.setdefault(frozenset((r.src_node, r.dst_node)),
                          Planned(r.src_node, r.dst_node, f"slow in round {r.round}, where {x}'s {side} are otherwise "
                                                          "normal"))
    for r in slow.rows:
        if r.src_node not in suspects and r.dst_node not in suspects:
            chosen.setdefault(frozenset((r.src_node, r.dst_node)),
                              Planned(r.src_node, r.dst_node, f"slow in round {r.round}"))
    return list(chosen.values())


def _partners(slow: _SlowPairs, nodes: list[str], suspects: dict[str, str]) -> dict[str, list[str]]:
    """Each suspect's healthy partners: those it was slow with first, and among them the fewest retests given
    so far, then the first in `nodes`; where it was slow with too few healthy nodes, the least loaded others.
    A partner must be clean the way the retest uses it (its receives for a suspect's sends, its sends for its
    receives): with three nodes, a receiver "proven" slow by a sender that was slow to everyone is no proof."""
    order = {n: i for i, n in enumerate(nodes)}
    healthy = [n for n in nodes if n not in suspects]
    load = dict.fromkeys(healthy, 0)
    found: dict[str, list[str]] = {}
    for x, way in suspects.items():
        side = "receive" if way == "send" else "send"
        was_slow = {p for p in (other_end(r, x) for r in slow.of.get(x, ())) if p in load and slow.clean(p, side)}
        picked = heapq.nsmallest(PARTNERS, was_slow, key=lambda n: (load[n], order[n]))
        if len(picked) < PARTNERS:
            rest = (n for n in healthy if n not in was_slow and slow.clean(n, side))
            picked += heapq.nsmallest(PARTNERS - len(picked), rest, key=lambda n: (load[n], order[n]))
        for p in picked:
            load[p] += 1
        found[x] = picked
    return found


def _median_without(values: list[float], value: float) -> float:
    """statistics.median of sorted `values` with one `value` taken out (at least one is left)."""
    j = bisect.bisect_left(values, value)
    m = len(values) - 1

    def at(k: int) -> float:
        return values[k] if k < j else values[k + 1]

    return at(m // 2) if m % 2 else (at(m // 2 - 1) + at(m // 2)) / 2


def unexplained(slow: _SlowPairs, suspects: dict[str, str], b: Bars) -> list[tuple[PairRow, str, float]]:
    """The pairs between a suspect and a healthy node whose bandwidth is more than FAR x below the suspect's pace,
    each with its suspect and that pace: the median Gbps of its other pairs the same way (its sends, or its
    receives: a node's fault picks a direction) with healthy nodes below the bar, two at least (of two pairs
    alone, either could be the odd one). A pair of two suspects carries two faults, so it is slower than either's
    pace and says nothing of a third; a pair slow only in latency has no bandwidth to set apart."""
    found = []
    for x in suspects:
        mine = [r for r in slow.of.get(x, ()) if r.gbps < b.bar * b.gbps and other_end(r, x) not in suspects]
        pace = {sends: sorted(r.gbps for r in mine if (r.src_node == x) == sends) for sends in (True, False)}
        for r in mine:
            same = pace[r.src_node == x]
            if len(same) - 1 >= 2 and r.gbps * FAR < (median := _median_without(same, r.gbps)):
                found.append((r, x, median))
    return found


def other_side(slow: _SlowPairs, suspects: dict[str, str]) -> list[tuple[PairRow, str, str]]:
    """The slow pairs between a suspect and a healthy node on the suspect's other side, where that side is mostly
    normal (at most half of its pairs slow), each with its suspect and that side ("sends", "receives"): a node
    whose sends are slow does not slow what it receives, so such a pair is a link's own fault."""
    found = []
    for x, way in suspects.items():
        side = "receive" if way == "send" else "send"
        mine = [r for r in slow.of.get(x, ()) if end(r, side) == x]
        if 2 * len(mine) <= slow.ways[(x, side)]:
            found += [(r, x, f"{side}s") for r in mine if other_end(r, x) not in suspects]
    return found


class _Retests:
    """The retests indexed: by way (the first of each), by suspect, and by the node at either end."""

    def __init__(self, retests: list[Retest]) -> None:
        self.of_way: dict[tuple[str, str], Retest] = {}
        self.for_suspect: dict[str, list[Retest]] = defaultdict(list)
        self.sent: dict[str, list[Retest]] = defaultdict(list)
        self.received: dict[str, list[Retest]] = defaultdict(list)
        for t in retests:
            self.of_way.setdefault((t.src_node, t.dst_node), t)
            if t.suspect:
                self.for_suspect[t.suspect].append(t)
            self.sent[t.src_node].append(t)
            self.received[t.dst_node].append(t)

    def touch(self, node: str) -> bool:
        return bool(self.sent.get(node) or self.received.get(node))


def judge(rows: list[PairRow], retests: list[Retest], nodes: list[str], bar: float) -> Verdicts:
    found = Verdicts()
    if not rows:
        return found
    b, suspects = learn(rows, bar)
    found.bars, found.ways = b, suspects
    slow = _SlowPairs(rows, b, suspects)
    again = _Retests(retests)
    own: dict[str, list[tuple[PairRow, float]]] = defaultdict(list)
    for r, x, pace in unexplained(slow, suspects, b):
        own[x].append((r, pace))
    sides = other_side(slow, suspects)
    apart = {(r.src_node, r.dst_node) for pairs in own.values() for r, _ in pairs} | {
        (r.src_node, r.dst_node) for r, _, _ in sides}
    for x, way in suspects.items():
        not_proof: set[tuple[str, str]] = set()  # retests slow through their link's own fault, not the suspect's
        for r, pace in own.get(x, ()):
            if (seen := _own_link(r, x, pace, again, b)) is not None:
                text, bad = seen
                (found.bad_links if bad else found.flaky).append(text)
                if bad:
                    not_proof.add((r.src_node, r.dst_node))
        # Slow again the way that made it a suspect: a node's own fault is in its sends or its receives,
        # and this host's noise slows either at random.
        proof = [t for t in again.for_suspect.get(x, ()) if t.slow and end_of(t, way) == x
                 and (t.src_node, t.dst_node) not in not_proof]
        against = sorted({t.dst_node if way == "send" else t.src_node for t in proof})
        mine = slow.of.get(x, [])
        if len(against) >= PARTNERS:
            worst = min(proof, key=lambda t: t.gbps)
            what = f"sends to {worst.dst_node}" if way == "send" else f"receives from {worst.src_node}"
            found.condemned[x] = [(f"slow against {len(against)} healthy partners ({', '.join(against)}) on retest: "
                                   f"{what} at {b.why(worst.gbps, worst.latency_us)}")]
        elif against:
            found.suspects[x] = (f"in {len(mine)} slow pairs, slow again against 1 healthy partner ({against[0]}): "
                                 "not proven")
        elif again.touch(x):
            found.flaky += [f"{r.src_node} -> {r.dst_node}: {b.why(r.gbps, r.latency_us)} in round {r.round}, "
                            f"{x} normal against healthy partners on retest" for r in mine
                            if (r.src_node, r.dst_node) not in apart]
        else:
            found.suspects[x] = f"in {len(mine)} slow pairs, not measured again: not proven"
    for r, x, side in sides:
        if (t := again.of_way.get((r.src_node, r.dst_node))) is not None:
            text = (f"{r.src_node} -> {r.dst_node}: {b.why(r.gbps, r.latency_us)} in round {r.round}, where {x}'s "
                    f"{side} are otherwise normal; {t.gbps:.3g} Gbps on retest")
            (found.bad_links if t.slow else found.flaky).append(text)
    for r in slow.rows:
        if r.src_node in suspects or r.dst_node in suspects:
            continue
        if (t := again.of_way.get((r.src_node, r.dst_node))) is None:
            continue
        text = (f"{r.src_node} -> {r.dst_node}: {b.why(r.gbps, r.latency_us)} in round {r.round}, "
                f"{t.gbps:.3g} Gbps on retest")
        (found.bad_links if t.slow else found.flaky).append(text)
    if len(nodes) == 2 and found.bad_links:  # one pair has no third node to break the tie
        for n in nodes:
            found.suspects[n] = "two nodes: a slow link between them cannot tell which one is at fault"
    return found


def end_of(t: Retest, way: str) -> str:
    """The node whose `way` a retest is."""
    return t.src_node if way == "send" else t.dst_node


def _own_link(r: PairRow, x: str, pace: float, again: _Retests, b: Bars) -> tuple[str, bool] | None:
    """A pair its suspect `x` does not explain, on its second look: what is said of it and whether it is a bad
    link; None when it was not measured again. It was set apart by its bandwidth, and is judged by it: back above
    the bar, or below it but no longer FAR x below `x` the same way against its other partners, it is flaky (its
    own fault passed; what is left is x's). Still far below, or below where `x` is not: a bad link."""
    t = again.of_way.get((r.src_node, r.dst_node))
    if t is None:
        return None
    text = (f"{r.src_node} -> {r.dst_node}: {b.why(r.gbps, r.latency_us)} in round {r.round}, where {x}'s other "
            f"slow pairs that way ran at {pace:.3g} Gbps; {t.gbps:.3g} Gbps on retest")
    low = b.bar * b.gbps
    if t.gbps >= low:
        return text, False
    sends = r.src_node == x
    others = [o.gbps for o in (again.sent if sends else again.received).get(x, ()) if o is not t]
    if others and (now := statistics.median(others)) < low and t.gbps * FAR >= now:
        return text + f", as slow as {x} against its other partners ({now:.3g} Gbps)", False
    return text, True


def rounds_of(pairs: list[Planned]) -> list[list[Planned]]:
    """The retests packed into rounds of disjoint pairs, each into the first round where both its nodes are free,
    so a big fleet's retests take few rounds."""
    out: list[list[Planned]] = []
    busy: dict[str, set[int]] = defaultdict(set)
    for pair in pairs:
        taken = busy[pair.a] | busy[pair.b]
        i = next(i for i in range(len(out) + 1) if i not in taken)
        if i == len(out):
            out.append([])
        out[i].append(pair)
        busy[pair.a].add(i)
        busy[pair.b].add(i)
    return out


class Looks:
    """Rank 0's side of the retests: the plan from the rounds' rows, and each retest kept as its rows arrive
    (each way its fastest message, and over both looks the faster), then the pairs still slow for a second look."""

    def __init__(self, rows: list[PairRow], nodes: list[str], bar: float) -> None:
        self.bars, found = learn(rows, bar) if rows else (None, {})
        self.todo = plan(rows, nodes, self.bars, found) if self.bars is not None else []
        self._planned = {frozenset((p.a, p.b)): p for p in self.todo}
        b = self.bars
        self._first = {(r.src_node, r.dst_node): r.gbps for r in rows if b is not None and b.slow(r.gbps, r.latency_us)}
        self.kept: dict[tuple[str, str], Retest] = {}

    def keep(self, rows: list[PairRow]) -> None:
        assert self.bars is not None  # only a plan's pairs are measured again
        for r in rows:
            way = (r.src_node, r.dst_node)
            gbps, latency_us = r.gbps, r.latency_us
            if (before := self.kept.get(way)) is not None:  # what the link did at all, in either look
                gbps, latency_us = max(gbps, before.gbps), min(latency_us, before.latency_us)
            p = self._planned[frozenset(way)]
            self.kept[way] = Retest(*way, gbps, latency_us, self._first.get(way), self.bars.slow(gbps, latency_us),
                                    p.why, p.suspect)

    def still_slow(self) -> list[Planned]:
        """The pairs slow either way on their last look."""
        return [p for p in self.todo if self.kept[(p.a, p.b)].slow or self.kept[(p.b, p.a)].slow]
