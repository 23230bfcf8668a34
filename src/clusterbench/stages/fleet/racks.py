"""A fault the nodes of one rack share, named as their switch (docs/methodology.md §16).

A leaf switch whose uplink is bad slows every pair between its nodes and the rest of the fleet, and none
inside the rack: the rounds make each of its nodes a suspect and the retests condemn them one by one, 16
bad nodes where there is one bad switch. With a topology, a switch most of whose nodes (SHARE of them, two
at least) the links found slow is named, with how its nodes ran across the spine and inside the rack:
normal inside (above the fleet's bar), or at least FAR x faster inside than across, the fault is across.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict

from clusterbench.stages.comm.records import PairRow
from clusterbench.stages.fleet.retests import FAR, Verdicts

SHARE = 0.75


def shared(rows: list[PairRow], racks: dict[str, str], links: Verdicts) -> dict[str, tuple[str, list[str]]]:
    """Each switch whose nodes share a fault -> what is said of it, and its nodes the links named."""
    if links.bars is None or not racks:
        return {}
    members: dict[str, list[str]] = defaultdict(list)
    for node, switch in racks.items():
        members[switch].append(node)
    named = set(links.condemned) | set(links.suspects)
    found = {}
    for switch, nodes in sorted(members.items()):
        slow = [n for n in nodes if n in named and n in links.ways]
        if len(slow) < 2 or len(slow) < SHARE * len(nodes):
            continue
        found[switch] = (_text(switch, rows, racks, nodes, slow, links), slow)
    return found


def _text(switch: str, rows: list[PairRow], racks: dict[str, str], nodes: list[str], slow: list[str],
          links: Verdicts) -> str:
    b = links.bars
    assert b is not None
    way = Counter(links.ways[n] for n in slow).most_common(1)[0][0]
    inside = [r.gbps for r in rows if racks.get(r.src_node) == switch and racks.get(r.dst_node) == switch]
    mine = "src_node" if way == "send" else "dst_node"
    across = [r.gbps for r in rows if racks.get(getattr(r, mine)) == switch
              and racks.get(r.dst_node if way == "send" else r.src_node) != switch]
    doing = "send" if way == "send" else "receive"
    text = f"{switch}: {len(slow)} of its {len(nodes)} nodes {doing}"
    pace = statistics.median(across) if across else None
    if pace is not None:
        text += (f" at {pace / b.gbps:.2f}x across the spine (median {pace:.3g} Gbps against the fleet's "
                 f"{b.gbps:.3g})")
    if not inside:
        return text + "; no pair inside the rack was measured"
    within = statistics.median(inside)
    if within >= b.bar * b.gbps:
        return text + f"; inside the rack they are normal ({within:.3g} Gbps)"
    if pace is not None and within >= FAR * pace:  # below the bar, but nowhere near the fault's pace
        return text + f"; inside the rack they run {within / pace:.0f}x faster ({within:.3g} Gbps): the fault is across"
    return text + f"; inside the rack they are slow too ({within:.3g} Gbps)"
