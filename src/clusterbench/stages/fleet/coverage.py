"""Which pairs of nodes the fleet's rounds measure (docs/methodology.md §16). Torch-free.

Up to ALL_UP_TO nodes, every pair, in n-1 rounds of disjoint pairs. Beyond it, by default, each node is
measured against `partners` distinct others in that many rounds, each a perfect matching drawn from a
seed: the rounds of the circle method over the nodes in a shuffled order, so that no pair comes twice and
every node has partners across the whole fleet. A node's own fault (a slow NIC, a starved host) slows all
of its pairs, so a few partners find it as surely as all of them, while the rounds, the pair rows and the
judge grow as n x partners instead of n²; a bad link between two healthy nodes is found only where its
pair is drawn (partners / (n - 1) of them), which the summary says.

With a topology (node -> leaf switch), some rounds are drawn inside the racks and the rest across them,
so that a fault the nodes of one rack share (a bad uplink) shows as slow across and normal inside.
"""

from __future__ import annotations

import random
from collections import defaultdict

from clusterbench.stages.comm import schedule
from clusterbench.stages.fleet.options import ALL_UP_TO
from clusterbench.stages.fleet.records import Coverage

INSIDE_SHARE = 0.25  # with a topology: this share of the rounds inside the racks (one at least)
CANDIDATES = 4  # with a topology: rounds across are chosen among this many times as many drawn

Rounds = list[list[tuple[int, int]]]


def plan(n: int, mode: str, partners: int, seed: int, racks: list[str] | None = None) -> tuple[Rounds, Coverage]:
    """The rounds of pairs of nodes 0..n-1, and what they cover. `mode`: "all", "sampled", or "auto" (all up to
    ALL_UP_TO nodes); `racks`: each node's leaf switch, or None."""
    if mode == "auto":
        mode = "all" if n <= ALL_UP_TO else "sampled"
    possible = n * (n - 1) // 2
    if mode == "all":
        every = schedule.rounds(n)
        return every, Coverage("all", n - 1, len(every), possible, possible)
    rng = random.Random(seed)
    inside: Rounds = []
    if racks is not None:
        drawn, inside = _by_rack(n, partners, racks, rng)
    else:
        drawn = _sampled(list(range(n)), partners, rng)
    pairs = sum(len(r) for r in drawn)  # each once: the rounds never repeat a pair
    return drawn, Coverage("sampled", _fewest_partners(n, drawn), len(drawn), pairs, possible, seed, len(inside))


def _sampled(nodes: list[int], count: int, rng: random.Random, avoid: set[tuple[int, int]] | None = None,
             racks: list[str] | None = None) -> Rounds:
    """`count` rounds (one more for an odd number of nodes, each of whom sits one out) of the circle method over
    `nodes` shuffled: distinct pairs, each round a perfect matching. `avoid`: pairs already measured, left out;
    `racks`: each node's rack, where the rounds with the fewest pairs inside a rack are chosen (of a sample of
    CANDIDATES x as many as needed)."""
    want = min(count + len(nodes) % 2, schedule.count(len(nodes)))
    shuffled = rng.sample(nodes, len(nodes))
    turns = rng.sample(range(schedule.count(len(nodes))),
                       want if racks is None else min(schedule.count(len(nodes)), CANDIDATES * want))
    candidates = [[tuple(sorted((shuffled[a], shuffled[b]))) for a, b in schedule.round_of(len(nodes), t)]
                  for t in turns]
    if racks is not None:
        candidates.sort(key=lambda r: sum(racks[a] == racks[b] for a, b in r))
    seen = set(avoid or ())
    out = []
    for r in candidates[:want]:
        kept = [p for p in r if p not in seen]
        # The nodes of a pair left out sit idle this round: paired with each other where they have not met.
        idle = [a for p in r if p in seen for a in p]
        rng.shuffle(idle)
        while len(idle) >= 2:
            a = idle.pop()
            b = next((b for b in idle if tuple(sorted((a, b))) not in seen), None)
            if b is not None:
                idle.remove(b)
                kept.append((min(a, b), max(a, b)))
        seen.update(kept)
        out.append(kept)
    return out


def _by_rack(n: int, partners: int, racks: list[str], rng: random.Random) -> tuple[Rounds, Rounds]:
    """Rounds inside the racks (each rack's own circle, all racks at once), then rounds across the fleet that
    favour pairs of different racks."""
    members: dict[str, list[int]] = defaultdict(list)
    for node, rack in enumerate(racks):
        members[rack].append(node)
    biggest = max(len(m) for m in members.values())
    count = min(max(1, round(partners * INSIDE_SHARE)), biggest - 1, partners - 1)
    inside: Rounds = [[] for _ in range(count)]
    for nodes in members.values():
        for i, pairs in enumerate(_sampled(nodes, count, rng)[:count]):
            inside[i] += pairs
    inside = [r for r in inside if r]
    measured = {p for r in inside for p in r}
    across = _sampled(list(range(n)), partners - len(inside), rng, avoid=measured, racks=racks)
    return inside + across, inside


def _fewest_partners(n: int, schedule: Rounds) -> int:
    """The fewest distinct partners any node meets in `schedule`."""
    met = [0] * n
    for r in schedule:
        for a, b in r:
            met[a] += 1
            met[b] += 1
    return min(met) if met else 0

