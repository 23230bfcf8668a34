"""The median of a set of figures as some are set aside, in O(log n) a step (docs/methodology.md §16).

Learning a fleet's pair bars by explaining away sets a suspect's pairs aside and takes the median of
the rest again, once per suspect: a fresh sort each time made it quadratic in the pairs at a fixed
share of faulty nodes. Here the figures are sorted once, and a Fenwick tree over that order counts the
ones still kept, so that the k-th kept figure is found by descending the tree.
"""

from __future__ import annotations

import bisect


class KeptMedian:
    """Figures by their index: `drop(i)` sets one aside, `median()` is `statistics.median` of the rest."""

    def __init__(self, values: list[float]) -> None:
        order = sorted(range(len(values)), key=values.__getitem__)
        self.sorted = [values[i] for i in order]
        self.index_at = order  # sorted position -> the figure's index
        self._position = [0] * len(values)
        for position, index in enumerate(order):
            self._position[index] = position
        self.kept = len(values)
        # Every position counted once, built in O(n): each node adds itself to its parent.
        self._tree = [0] + [1] * len(values)
        for i in range(1, len(values) + 1):
            parent = i + (i & -i)
            if parent <= len(values):
                self._tree[parent] += self._tree[i]
        self._top = 1 << max(0, len(values).bit_length() - 1) if values else 0

    def drop(self, index: int) -> None:
        """Set figure `index` aside (once: the caller keeps track of which it dropped)."""
        i = self._position[index] + 1
        while i < len(self._tree):
            self._tree[i] -= 1
            i += i & -i
        self.kept -= 1

    def _kth(self, k: int) -> float:
        """The k-th smallest kept figure, from 1."""
        position, step = 0, self._top
        while step:
            nxt = position + step
            if nxt < len(self._tree) and self._tree[nxt] < k:
                position = nxt
                k -= self._tree[nxt]
            step >>= 1
        return self.sorted[position]

    def median(self) -> float:
        """The median of the kept figures, as statistics.median gives it (the mean of the middle two
        of an even count); ValueError when none is kept."""
        n = self.kept
        if n == 0:
            raise ValueError("no figure is kept")
        if n % 2:
            return self._kth(n // 2 + 1)
        return (self._kth(n // 2) + self._kth(n // 2 + 1)) / 2

    def indexes_from(self, low: float, high: float, *, above: bool = False) -> list[int]:
        """The indexes of the figures in [low, high), kept or not; `above`: in (low, high] instead."""
        cut = bisect.bisect_right if above else bisect.bisect_left
        return self.index_at[cut(self.sorted, low):cut(self.sorted, high)]
