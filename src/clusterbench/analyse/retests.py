"""Which links between nodes to measure again, and what the second look proves (docs/methodology.md §16).

The rounds measure every pair of nodes once, many pairs at a time, each figure the median of its
messages. A pair is slow when its bandwidth is below `bar` x the median pair, or its latency above
LATENCY_BAR x the median latency, both medians over the healthy nodes' pairs. A node is a suspect
when most of its pairs in one direction (two at least) are slow, not counting its pairs with the
suspects found before it (learn()); every other node is a healthy partner. The retests measure each
suspect against two healthy partners (those it was slow with first), and every other slow pair once
more, each keeping its fastest message and round trip, and a pair still slow a second time a second
later, each way keeping the faster look (fleet/links.py): noise only ever slows a link, so a link that
never reaches the bar in all its messages is slow, and one that reaches it once can. Then:
- a suspect slow again, the way it was slow (its sends or its receives), against at least two
  different healthy partners is condemned: one slow partner could be that partner's fault, two
  cannot (NVIDIA ClusterKit retests bad pairs alike), and noise picks no direction;
- a suspect slow again against one is a suspect still; against none, it is cleared, and its slow
  pairs are flaky;
- a pair slow in its round and normal on retest is flaky: reported, nobody excluded;
- a pair slow twice whose nodes are otherwise fine is a bad link, to be looked at, not a bad node.
A suspect's own fault holds its pairs' bandwidth to about one pace (a NIC's cap, a starved CPU's
share), so a pair of it more than FAR x below that pace, the same way, has a fault of its own, which
the suspect does not explain (unexplained()): it is measured again and judged as a link, whatever
the suspect's verdict, and its slow retest is no proof against the suspect while still far below it.
With two nodes no partner can break the tie: both are named suspects and neither is condemned.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from clusterbench.results.fleet import Retest
from clusterbench.results.schema import PairRow

LATENCY_BAR = 3.0  # ClusterKit's 2.1 x the lowest, taken against the median to stand a shared host's noise
PARTNERS = 2  # healthy partners a suspect is retested against; condemned when slow against this many
# Measured on the namespace fleets: a node starved by the host ran its pairs at 1.9-2.7 Gbps (1.4x apart), a node
# capped at 200 Mbit/s at 0.19 Gbps, 0.085 into a starved receiver (2.2x); a 200 Mbit/s link into the starved node
# ran 10-14x below its pace. 4x parts the two with room either way.
FAR = 4.0


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


@dataclass
class Verdicts:
    condemned: dict[str, list[str]] = field(default_factory=dict)  # node -> reasons
    suspects: dict[str, str] = field(default_factory=dict)  # node -> why it is not proven either way
    flaky: list[str] = field(default_factory=list)
    bad_links: list[str] = field(default_factory=list)


def _slow_rows(rows: list[PairRow], b: Bars) -> list[PairRow]:
    return [r for r in rows if b.slow(r.gbps, r.latency_us)]


def _worst(rows: list[PairRow], b: Bars) -> tuple[str, str] | None:
    """The node and direction ("send" or "receive") with the most slow pairs, where they are most of
    that direction's pairs (two at least); None when no node is so."""
    pairs: dict[tuple[str, str], list[bool]] = {}
    for r in rows:
        slow = b.slow(r.gbps, r.latency_us)
        pairs.setdefault((r.src_node, "send"), []).append(slow)
        pairs.setdefault((r.dst_node, "receive"), []).append(slow)
    worst = [(-sum(found), node, way) for (node, way), found in pairs.items()
             if sum(found) >= 2 and 2 * sum(found) > len(found)]
    return min(worst)[1:] if worst else None


def learn(rows: list[PairRow], bar: float) -> tuple[Bars, dict[str, str]]:
    """The bars and the suspects, learned together by explaining away. The node with the most slow pairs
    is a suspect; its pairs are set aside, the medians taken again over the rest, and the slow pairs
    counted again without it, until no node is left with most of its pairs in one direction slow. A
    node slow only with suspects is explained by them: a node held to a tenth of a CPU slows every
    partner's latency, and those partners are not suspects for it. Two bad nodes of five touch 11 of
    the 20 pairs, so the median of every pair is one of theirs. The medians are learned again only
    while a majority of the nodes is left to set them; suspects found beyond that are judged by the
    last bars. Suspects come worst first, each with the direction its slow pairs ran (send, receive)."""
    nodes = {r.src_node for r in rows} | {r.dst_node for r in rows}
    suspects: dict[str, str] = {}
    b, kept = _bars(rows, bar), rows
    while (worst := _worst(kept, b)) is not None:
        node, suspects[node] = worst
        kept = [r for r in kept if node not in (r.src_node, r.dst_node)]
        if 2 * len(suspects) < len(nodes) and kept:
            b = _bars(kept, bar)
    return b, suspects


def _bars(rows: list[PairRow], bar: float) -> Bars:
    return Bars(statistics.median(r.gbps for r in rows), statistics.median(r.latency_us for r in rows), bar)


def plan(rows: list[PairRow], nodes: list[str], b: Bars, suspects: dict[str, str]) -> list[tuple[str, str, str]]:
    """The pairs of nodes to measure again, each once, with why, from what learn() found in `rows`."""
    slow = _slow_rows(rows, b)
    chosen: dict[frozenset[str], tuple[str, str, str]] = {}
    for x in suspects:
        for p in _partners(x, slow, nodes, suspects):
            chosen.setdefault(frozenset((x, p)), (x, p, f"suspect {x} against healthy {p}"))
    for r, x, _ in unexplained(slow, suspects, b):
        chosen.setdefault(frozenset((r.src_node, r.dst_node)),
                          (r.src_node, r.dst_node, f"slow in round {r.round}, far slower than {x}'s other slow pairs"))
    for r in slow:
        if r.src_node not in suspects and r.dst_node not in suspects:
            chosen.setdefault(frozenset((r.src_node, r.dst_node)),
                              (r.src_node, r.dst_node, f"slow in round {r.round}"))
    return list(chosen.values())


def _partners(x: str, slow: list[PairRow], nodes: list[str], suspects: dict[str, str]) -> list[str]:
    """The healthy nodes suspect `x` is retested against and judged by: those it was slow with first."""
    was_slow = {r.dst_node if r.src_node == x else r.src_node for r in slow if x in (r.src_node, r.dst_node)}
    healthy = [n for n in nodes if n not in suspects]
    return sorted(healthy, key=lambda n: (n not in was_slow, nodes.index(n)))[:PARTNERS]


def unexplained(slow: list[PairRow], suspects: dict[str, str], b: Bars) -> list[tuple[PairRow, str, float]]:
    """The pairs between a suspect and a healthy node whose bandwidth is more than FAR x below the suspect's pace,
    each with its suspect and that pace: the median Gbps of its other pairs the same way (its sends, or its
    receives: a node's fault picks a direction) with healthy nodes below the bar, two at least (of two pairs
    alone, either could be the odd one). A pair of two suspects carries two faults, so it is slower than either's
    pace and says nothing of a third; a pair slow only in latency has no bandwidth to set apart."""
    found = []
    for x in suspects:
        mine = [r for r in slow if x in (r.src_node, r.dst_node) and r.gbps < b.bar * b.gbps
                and (r.dst_node if r.src_node == x else r.src_node) not in suspects]
        for r in mine:
            rest = [o.gbps for o in mine if o is not r and (o.src_node == x) == (r.src_node == x)]
            if len(rest) >= 2 and r.gbps * FAR < statistics.median(rest):
                found.append((r, x, statistics.median(rest)))
    return found


def rounds_of(pairs: list[tuple[str, str, str]]) -> list[list[tuple[str, str, str]]]:
    """The retests packed into rounds of disjoint pairs, so a big fleet's retests take few rounds."""
    out: list[list[tuple[str, str, str]]] = []
    busy: list[set[str]] = []
    for pair in pairs:
        i = next((i for i, nodes in enumerate(busy) if not nodes & {pair[0], pair[1]}), len(out))
        if i == len(out):
            out.append([])
            busy.append(set())
        out[i].append(pair)
        busy[i] |= {pair[0], pair[1]}
    return out


def judge(rows: list[PairRow], retests: list[Retest], nodes: list[str], bar: float) -> Verdicts:
    found = Verdicts()
    if not rows:
        return found
    b, suspects = learn(rows, bar)
    slow = _slow_rows(rows, b)
    own = {(r.src_node, r.dst_node): (r, x, pace) for r, x, pace in unexplained(slow, suspects, b)}
    for x, way in suspects.items():
        not_proof: set[tuple[str, str]] = set()  # retests slow through their link's own fault, not the suspect's
        for r, pace in [(r, pace) for r, y, pace in own.values() if y == x]:
            if (seen := _own_link(r, x, pace, retests, b)) is not None:
                text, bad = seen
                (found.bad_links if bad else found.flaky).append(text)
                if bad:
                    not_proof.add((r.src_node, r.dst_node))
        partners = _partners(x, slow, nodes, suspects)
        # Slow again the way that made it a suspect: a node's own fault is in its sends or its receives,
        # and this host's noise slows either at random.
        again = [t for t in retests if t.slow and (t.src_node if way == "send" else t.dst_node) == x
                 and (t.dst_node if way == "send" else t.src_node) in partners
                 and (t.src_node, t.dst_node) not in not_proof]
        against = sorted({t.dst_node if way == "send" else t.src_node for t in again})
        mine = [r for r in slow if x in (r.src_node, r.dst_node)]
        if len(against) >= PARTNERS:
            worst = min(again, key=lambda t: t.gbps)
            what = f"sends to {worst.dst_node}" if way == "send" else f"receives from {worst.src_node}"
            found.condemned[x] = [(f"slow against {len(against)} healthy partners ({', '.join(against)}) on retest: "
                                   f"{what} at {b.why(worst.gbps, worst.latency_us)}")]
        elif against:
            found.suspects[x] = (f"in {len(mine)} slow pairs, slow again against 1 healthy partner ({against[0]}): "
                                 "not proven")
        elif any(x in (t.src_node, t.dst_node) for t in retests):
            found.flaky += [f"{r.src_node} -> {r.dst_node}: {b.why(r.gbps, r.latency_us)} in round {r.round}, "
                            f"{x} normal against healthy partners on retest" for r in mine
                            if (r.src_node, r.dst_node) not in own]
    for r in slow:
        if r.src_node in suspects or r.dst_node in suspects:
            continue
        again = [t for t in retests if {t.src_node, t.dst_node} == {r.src_node, r.dst_node}
                 and t.src_node == r.src_node]
        if not again:
            continue
        text = (f"{r.src_node} -> {r.dst_node}: {b.why(r.gbps, r.latency_us)} in round {r.round}, "
                f"{again[0].gbps:.3g} Gbps on retest")
        (found.bad_links if again[0].slow else found.flaky).append(text)
    if len(nodes) == 2 and found.bad_links:  # one pair has no third node to break the tie
        for n in nodes:
            found.suspects[n] = "two nodes: a slow link between them cannot tell which one is at fault"
    return found


def _own_link(r: PairRow, x: str, pace: float, retests: list[Retest], b: Bars) -> tuple[str, bool] | None:
    """A pair its suspect `x` does not explain, on its second look: what is said of it and whether it is a bad
    link; None when it was not measured again. It was set apart by its bandwidth, and is judged by it: back above
    the bar, or below it but no longer FAR x below `x` the same way against its other partners, it is flaky (its
    own fault passed; what is left is x's). Still far below, or below where `x` is not: a bad link."""
    t = next((t for t in retests if (t.src_node, t.dst_node) == (r.src_node, r.dst_node)), None)
    if t is None:
        return None
    text = (f"{r.src_node} -> {r.dst_node}: {b.why(r.gbps, r.latency_us)} in round {r.round}, where {x}'s other "
            f"slow pairs that way ran at {pace:.3g} Gbps; {t.gbps:.3g} Gbps on retest")
    low = b.bar * b.gbps
    if t.gbps >= low:
        return text, False
    sends = r.src_node == x
    others = [o.gbps for o in retests if o is not t and (o.src_node if sends else o.dst_node) == x]
    if others and (now := statistics.median(others)) < low and t.gbps * FAR >= now:
        return text + f", as slow as {x} against its other partners ({now:.3g} Gbps)", False
    return text, True
