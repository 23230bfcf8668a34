"""The teams of a scope side by side: the worst node (intra) or rail (inter) against the median.

Each team is taken at the largest size it measured: teams with different rank counts round a
Size split into per-rank chunks to different byte counts (1048576 B on 2 ranks, 1048572 B on 3).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from clusterbench.stages.comm.records import CommRow


@dataclass(frozen=True)
class Worst:
    row: CommRow  # the worst team's row at its largest size
    median_gbps: float  # the median busbw over the teams, each at its largest size
    teams: int

    @property
    def share(self) -> float | None:
        return self.row.busbw_gbps / self.median_gbps if self.median_gbps > 0 else None


def tops(rows: list[CommRow]) -> dict[str, CommRow]:
    """Each team's row at the largest size it measured, in the order the teams first appear."""
    top: dict[str, CommRow] = {}
    for r in rows:
        if r.team not in top or r.size_bytes > top[r.team].size_bytes:
            top[r.team] = r
    return top


def worst(rows: list[CommRow]) -> Worst:
    """The team with the lowest busbw, from the rows of one scope and one op."""
    top = tops(rows)
    row = min(top.values(), key=lambda r: r.busbw_gbps)
    return Worst(row, statistics.median(r.busbw_gbps for r in top.values()), len(top))
