"""--pattern pairwise: bandwidth each way and latency of every pair of ranks (docs/methodology.md §8).

Pairs are measured in rounds of disjoint pairs (the circle method of round-robin tournaments),
so n ranks need n-1 rounds, not n^2, and within a round no rank serves two pairs. Every rank
waits at the end of each round, so a pair never shares its links with the next round's.
"""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from clusterbench.comm import scopes, table
from clusterbench.comm.values import Values, dtype_named
from clusterbench.devices import synchronize
from clusterbench.dist import Worker
from clusterbench.errors import UsageError
from clusterbench.rank import Rank
from clusterbench.results.schema import CommOptions, PairRow

# The bandwidth message unless -e says otherwise: large enough to reach a link's rate, small
# enough that a 200 Mbit/s link still finishes a round in seconds.
PAIR_BYTES = {"cpu": 4 * 1024**2, "cuda": 256 * 1024**2}
BW_ITERS = 5
LATENCY_ITERS = 20
# Rank 0 saves the rows at most this often (and at the end, however the run ends): a fleet of a
# thousand nodes would otherwise rewrite a run.json of a million rows after each of its 1,023 rounds.
SAVE_EVERY_S = 2.0


def rounds(n: int) -> list[list[tuple[int, int]]]:
    """Every pair of 0..n-1 exactly once, in rounds of disjoint pairs: n-1 rounds (n rounds for odd n)."""
    seats: list[int | None] = list(range(n)) + ([None] if n % 2 else [])
    m = len(seats)
    out = []
    for _ in range(m - 1):
        pairs = [(seats[i], seats[m - 1 - i]) for i in range(m // 2)]
        out.append([(min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None])
        seats = [seats[0], seats[-1], *seats[1:-1]]  # keep the first seat, turn the rest one place
    return out


@dataclass(frozen=True)
class _Link:
    """One pair, from this rank's side."""

    me: int
    peer: int
    count: int
    values: Values
    device: torch.device

    def _send(self, t: torch.Tensor) -> None:
        dist.send(t, self.peer)

    def _recv(self, t: torch.Tensor) -> None:
        dist.recv(t, self.peer)

    def stream(self, src: int, iters: int, best: bool = False) -> tuple[float, int] | None:
        """src sends `iters` messages after a warm-up one; the receiver times each from its go-ahead
        and checks the last. Returns (median seconds per message, wrong elements) on the receiver:
        the median, because on a busy host one late wake-up would otherwise pass for a slow link.
        `best`: the fastest message instead, what the link can do at all (a retest's question)."""
        go = torch.zeros(1, device=self.device)
        if self.me == src:
            data = self.values.make(src, self.count)
            self._send(data)
            self._recv(go)
            for _ in range(iters):
                self._send(data)
            return None
        buf = torch.empty(self.count, dtype=self.values.dtype, device=self.device)
        self._recv(buf)
        synchronize(self.device)
        stamps = [time.perf_counter()]
        self._send(go)
        for _ in range(iters):
            self._recv(buf)
            synchronize(self.device)
            stamps.append(time.perf_counter())
        times = [b - a for a, b in itertools.pairwise(stamps)]
        seconds = min(times) if best else statistics.median(times)
        return seconds, self.values.mismatches(buf, lambda a, b: self.values.pattern(src, b - a, a))

    def ping(self, first: bool, count: int, iters: int, best: bool = False) -> float:
        """Round trips of a small message, started by `first`: half a round trip, in seconds, on both sides
        (the mean round trip's; `best`: the fastest one's)."""
        buf = self.values.make(self.me, count)
        steps = (self._send, self._recv) if first else (self._recv, self._send)
        for _ in range(2):  # warm-up round trips
            steps[0](buf)
            steps[1](buf)
        synchronize(self.device)
        stamps = [time.perf_counter()]
        for _ in range(iters):
            steps[0](buf)
            steps[1](buf)
            if best:
                synchronize(self.device)
                stamps.append(time.perf_counter())
        synchronize(self.device)
        if best:
            return min(b - a for a, b in itertools.pairwise(stamps)) / 2
        return (time.perf_counter() - stamps[0]) / (2 * iters)


def measure_pair(worker: Worker, a: int, b: int, opts: CommOptions, size: int, nround: int,
                 best: bool = False) -> list[PairRow]:
    """This rank's half of pair (a, b): each direction's bandwidth (kept by its receiver), then latency;
    `best`: the fastest message and round trip, not the typical one."""
    dtype = dtype_named(opts.dtype)
    count = max(1, size // dtype.itemsize)
    values = Values(dtype, worker.device, None, worker.world_size, zeros=False)
    peer = b if worker.rank == a else a
    link = _Link(worker.rank, peer, count, values, worker.device)
    iters = opts.iters or BW_ITERS
    received = {}
    for src in (a, b):
        got = link.stream(src, iters, best)
        if got is not None:
            received[src] = got
    small = max(1, opts.min_bytes // dtype.itemsize)
    one_way = link.ping(worker.rank == a, small, LATENCY_ITERS, best)
    nodes = {m.rank: m.node for m in worker.members}
    nbytes = count * dtype.itemsize
    return [PairRow(src=src, dst=worker.rank, src_node=nodes[src], dst_node=nodes[worker.rank], size_bytes=nbytes,
                    gbps=nbytes * 8 / seconds / 1e9, latency_us=one_way * 1e6, wrong=wrong, round=nround)
            for src, (seconds, wrong) in received.items()]


def run_pairwise(rank: Rank, opts: CommOptions) -> None:
    worker = rank.worker
    nodes = scopes.node_order(list(worker.members))
    players = [ranks[0] for ranks in nodes.values()] if opts.nodes_only else list(range(worker.world_size))
    if len(players) < 2:
        raise UsageError("--nodes-only: the job runs on one node, so there is no pair of nodes to measure")
    size = opts.max_bytes or PAIR_BYTES.get(worker.device.type, PAIR_BYTES["cpu"])
    who = f"{len(players)} {'nodes (one rank each)' if opts.nodes_only else 'ranks'} on {len(nodes)} node(s)"
    count = len(rounds(len(players)))
    rank.say(f"# clusterbench comm --pattern pairwise: {who}, {count} round{'s' * (count > 1)} of disjoint pairs, "
             f"{size} B each way, backend {worker.backend}")
    measure_rounds(rank, players, opts, size)
    if rank.folder is not None:
        rank.say(table.pair_summary(rank.folder.run.pairs, opts.unit, opts.flag_below))


def measure_rounds(rank: Rank, players: list[int], opts: CommOptions, size: int,
                   phase: str = "pairwise") -> list[PairRow]:
    """Every pair of `players` (ranks) in rounds of disjoint pairs, `size` bytes each way; rank 0
    records each round's rows as it ends. Returns every row, on every rank."""
    worker, folder = rank.worker, rank.folder
    schedule = rounds(len(players))
    started = time.monotonic()
    found: list[PairRow] = []
    for i, pairs in enumerate(schedule, 1):
        rank.progress.at(f"{phase} round {i}/{len(schedule)}")
        mine: list[PairRow] = []
        for a, b in ((players[a], players[b]) for a, b in pairs):
            if worker.rank in (a, b):
                mine = measure_pair(worker, a, b, opts, size, i)
        everyone: list[list[PairRow]] = [[] for _ in range(worker.world_size)]
        dist.all_gather_object(everyone, mine)  # also the end of the round for every rank
        rows = [r for rows in everyone for r in rows]
        found += rows
        if folder is not None:
            for row in rows:
                folder.append("pairs", row, min_interval_s=SAVE_EVERY_S)
            rank.say(f"# round {i}/{len(schedule)} done after {time.monotonic() - started:.1f} s")
    if folder is not None:
        folder.flush()
    return found
