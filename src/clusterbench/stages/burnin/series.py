"""Each device's windows as rank 0 keeps them for run.json, bounded however long the soak: at most MAX_POINTS points
a device. When a device's series fills, neighbouring points merge in pairs, and each later point stands for twice
as many windows, so every point of a series stands for as many windows as the others (but the last, still
filling). Merged, a point's figures are the mean of its windows', its wrong words their sum, its repeat the same
only where each was, and its digest theirs where they agree, else the hash of theirs in order: two devices that
computed alike still agree, and one that strayed in any of its windows still stands apart.
"""

from __future__ import annotations

import hashlib

from clusterbench.stages.burnin.records import Window

# An 8-hour soak of 30-second windows is 960 windows: kept as 240 points of 4 windows (2 minutes) each, which a
# drift's start is told within, in a section as large as a quarter-hour soak's.
MAX_POINTS = 240
_FIGURES = ("matmul_tflops", "memory_gbps", "busbw_gbps")


def merge(rows: list[Window]) -> Window:
    """One point for consecutive windows of one device."""
    if len(rows) == 1:
        return rows[0]
    last = rows[-1]
    spans = sum(w.spans for w in rows)
    means = {}
    for figure in _FIGURES:
        known = [(getattr(w, figure), w.spans) for w in rows if getattr(w, figure) is not None]
        means[figure] = sum(v * n for v, n in known) / sum(n for _, n in known) if known else None
    repeats = [w.repeat_same for w in rows if w.repeat_same is not None]
    digests = [w.digest for w in rows]
    if None in digests:
        digest = None
    elif len(set(digests)) == 1:
        digest = digests[0]
    else:
        digest = hashlib.blake2b("".join(digests).encode(), digest_size=16).hexdigest()
    return Window(last.rank, last.node, last.device, last.kind, last.t_s, means["matmul_tflops"],
                  means["memory_gbps"], means["busbw_gbps"], sum(w.wrong_words for w in rows),
                  all(repeats) if repeats else None, digest, spans)


class Series:
    """Every device's windows so far, thinned to at most `max_points` points each."""

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self.max_points = max_points - max_points % 2  # pairs merge whole
        self.per_point = 1  # windows each full point stands for
        self.points: dict[int, list[Window]] = {}
        self.filling: dict[int, list[Window]] = {}

    def add(self, rows: list[Window]) -> None:
        """One window of some devices (each rank's own)."""
        for w in rows:
            filling = self.filling.setdefault(w.rank, [])
            filling.append(w)
            if len(filling) == self.per_point:
                self.points.setdefault(w.rank, []).append(merge(filling))
                filling.clear()
        if any(len(points) >= self.max_points for points in self.points.values()):
            self.points = {rank: [merge(points[i:i + 2]) for i in range(0, len(points), 2)]
                           for rank, points in self.points.items()}
            self.per_point *= 2

    def windows(self) -> list[Window]:
        """Every device's points, and the point still filling, in the order of the ranks and of time."""
        found = []
        for rank in sorted(set(self.points) | set(self.filling)):
            found += self.points.get(rank, [])
            if self.filling.get(rank):
                found.append(merge(self.filling[rank]))
        return found
