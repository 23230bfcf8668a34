"""What the nodes of a fleet must agree on, and which disagree (docs/methodology.md §16): their facts
(driver, kernel, GPU count, ...), and the losses of the numerics task, bit for bit.

Both are majority votes: a value held by more than half of those that have it is the fleet's;
the others are the odd ones out. Without such a majority nobody is named odd (two nodes against
each other cannot say which one is wrong).
"""

from __future__ import annotations

from collections import Counter

from clusterbench.stages.fleet.records import Divergence, NodeProbe, Numerics, OddFact

MIN_VOTERS = 3


def _majority(values: list[object]) -> tuple[object, int] | None:
    if not values:
        return None
    value, count = Counter(values).most_common(1)[0]
    return (value, count) if 2 * count > len(values) else None


def odd_facts(probes: list[NodeProbe]) -> list[OddFact]:
    """Each fact some node disagrees on with the majority of the nodes that report it."""
    found = []
    names = sorted({name for p in probes for name in p.facts})
    for name in names:
        held = [(p.node, p.facts[name]) for p in probes if name in p.facts]
        won = _majority([value for _, value in held])
        if won is None or len(held) < MIN_VOTERS:
            continue
        odd = [(node, value) for node, value in held if value != won[0]]
        if odd:
            found.append(OddFact(name, [n for n, _ in odd], [v for _, v in odd], str(won[0]), won[1]))
    return found


def divergences(numerics: list[Numerics], klass_of: dict[str, str]) -> tuple[list[Divergence], dict[str, str]]:
    """The devices whose losses leave their class's majority (each at its first differing step), and
    the nodes no vote could clear, each with why."""
    by_class: dict[str, list[Numerics]] = {}
    for n in numerics:
        by_class.setdefault(klass_of.get(n.node, "?"), []).append(n)
    found: list[Divergence] = []
    unsettled: dict[str, str] = {}
    for klass, runs in sorted(by_class.items()):
        if len(runs) < MIN_VOTERS:
            if len({tuple(r.losses) for r in runs}) > 1:
                for r in runs:
                    unsettled[r.node] = (f"numerics: the {len(runs)} devices of {klass} disagree on the numerics task, "
                                         "and so few cannot vote which is wrong")
            continue
        steps = min(len(r.losses) for r in runs)
        settled: set[int] = set()
        for step in range(steps):
            voting = [r for r in runs if r.rank not in settled]
            won = _majority([r.losses[step] for r in voting])
            if won is None:
                for r in voting:
                    unsettled[r.node] = f"numerics: no majority of {klass} at step {step + 1} of the numerics task"
                break
            for r in voting:
                if r.losses[step] != won[0]:
                    settled.add(r.rank)
                    found.append(Divergence(r.node, r.rank, r.device, step + 1, r.losses[step], float(won[0]),
                                            won[1], len(voting)))
    return found, unsettled
