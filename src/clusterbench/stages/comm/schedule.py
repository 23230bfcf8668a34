"""Rounds of disjoint pairs: the circle method of round-robin tournaments (docs/methodology.md §8).

Within a round no rank serves two pairs, and n players meet each other exactly once in n-1 rounds (n
rounds for odd n, each player sitting one out). And what a round's receivers send rank 0, as its rows.
Torch-free: the fleet's plan of pairs draws on it, and the fleet simulator (bench/bench_fleet_scale.py).
"""

from __future__ import annotations

from clusterbench.stages.comm.records import PairRow


def count(n: int) -> int:
    """How many rounds n players need: n-1, or n for odd n."""
    return max(0, n + n % 2 - 1)


def round_of(n: int, t: int) -> list[tuple[int, int]]:
    """Round t (from 0) of the circle method over players 0..n-1, in O(n): the first seat stays, the others
    have turned t places (a player n, for odd n, is the seat that sits out)."""
    m = n + n % 2
    turn = m - 1

    def seat(p: int) -> int:
        return 0 if p == 0 else 1 + (p - 1 - t) % turn

    pairs = [(seat(i), seat(m - 1 - i)) for i in range(m // 2)]
    return [(min(a, b), max(a, b)) for a, b in pairs if a < n and b < n]


def rounds(n: int) -> list[list[tuple[int, int]]]:
    """Every pair of 0..n-1 exactly once, in rounds of disjoint pairs: n-1 rounds (n rounds for odd n)."""
    return [round_of(n, t) for t in range(count(n))]


def round_rows(slots: list[list[float]], pairs: list[tuple[int, int]], players: list[int], node_of: dict[int, str],
               nbytes: int, nround: int) -> list[PairRow]:
    """A round's rows from what its receivers sent rank 0: for pair q of `pairs` (indexes into `players`, the
    ranks), slot 2q holds the first player's sends as the second received them, slot 2q+1 the other way; each
    slot Gbps, one-way latency in microseconds and wrong elements."""
    rows = []
    for q, (x, y) in enumerate(pairs):
        for s, (src, dst) in ((2 * q, (players[x], players[y])), (2 * q + 1, (players[y], players[x]))):
            gbps, latency_us, wrong = slots[s]
            rows.append(PairRow(src, dst, node_of[src], node_of[dst], nbytes, gbps, latency_us, int(wrong), nround))
    return rows
