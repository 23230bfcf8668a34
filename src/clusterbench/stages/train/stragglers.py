"""Which rank holds the others back in training, from every rank's step split (docs/methodology.md §4).

A rank's own work is its compute, forward + backward; every rank runs the same shapes, so on
healthy hardware their compute is alike and a rank whose compute is long is slow itself, while
the others show the same time as waiting in gradient sync. The slowest rank is judged against
the median of the OTHER ranks: with two ranks the median of all would be halfway to the slow one
and halve what is seen, and with many the others' median is the healthy rank's figure whatever
the straggler does. The phase named is the one of forward and backward that exceeds the others'
median by the most.

Only DDP's split isolates a rank's own compute: under FSDP the ranks meet at every layer's
parameter all-gather inside forward and backward, so a fast rank waits for the slowest in its
"compute" too and the ratio says nothing (stages/train/phases.py).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from clusterbench.stages.train.records import RankPhases

_COMPUTE = ("forward", "backward")


@dataclass(frozen=True)
class Straggler:
    slowest: RankPhases
    ratio: float  # its compute over the median compute of the other ranks
    phase: str  # "forward" or "backward": the one that is long
    others_wait_s: float  # median over the other ranks of their gradient-sync seconds per step
    others_wait_share: float  # that wait over their median step


def judge_reason(phases: list[RankPhases], parallel: str) -> str | None:
    """Why these phases name no straggler, or None when they can."""
    if len(phases) < 2:
        return "one rank: no other rank to wait for it"
    if parallel != "ddp":
        return (f"under {parallel} the ranks meet at every layer's all-gather inside forward and backward, "
                "so a fast rank's compute holds its wait for the slowest too")
    if min(p.compute_s for p in phases) <= 0:
        return "a rank timed no step"
    return None


def find(phases: list[RankPhases]) -> Straggler:
    """The rank with the largest compute, against the others; at least two ranks, each with compute."""
    slowest = max(phases, key=lambda p: p.compute_s)
    others = [p for p in phases if p is not slowest]

    def median(phase: str) -> float:
        return statistics.median(getattr(p, f"{phase}_s") for p in others)

    phase = max(_COMPUTE, key=lambda ph: getattr(slowest, f"{ph}_s") - median(ph))
    wait, step = median("sync"), statistics.median(p.step_s for p in others)
    ratio = slowest.compute_s / statistics.median(p.compute_s for p in others)
    return Straggler(slowest, ratio, phase, wait, wait / step if step > 0 else 0.0)


def finding(s: Straggler) -> str:
    """The straggler in one sentence: who, how much slower, where, and what it costs the others."""
    p = s.slowest
    return (f"rank {p.rank} (node {p.node}, {p.device}) computes {s.ratio:.2f}x the median of the other ranks "
            f"({s.phase} {getattr(p, f'{s.phase}_s'):.3g} s of its {p.step_s:.3g} s step); the other ranks spend "
            f"{s.others_wait_s:.3g} s ({s.others_wait_share:.0%}) of each step in gradient sync")
