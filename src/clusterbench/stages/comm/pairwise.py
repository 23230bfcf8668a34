"""--pattern pairwise: bandwidth each way and latency of every pair of ranks (docs/methodology.md §8).

Pairs are measured in rounds of disjoint pairs (the circle method of round-robin tournaments),
so n ranks need n-1 rounds, not n^2, and within a round no rank serves two pairs. Every rank
waits at the end of each round, so a pair never shares its links with the next round's.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from clusterbench.errors import UsageError
from clusterbench.runtime.devices import synchronize
from clusterbench.runtime.dist import Worker
from clusterbench.runtime.rank import Rank
from clusterbench.stages.comm import scopes, table
from clusterbench.stages.comm.records import PAIRS, CommOptions, PairRow
from clusterbench.stages.comm.schedule import round_rows, rounds
from clusterbench.stages.comm.values import Values, dtype_named

# The bandwidth message unless -e says otherwise: large enough to reach a link's rate, small
# enough that a 200 Mbit/s link still finishes a round in seconds.
PAIR_BYTES = {"cpu": 4 * 1024**2, "cuda": 256 * 1024**2}
BW_ITERS = 5
LATENCY_ITERS = 20


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


def measure_pair(worker: Worker, a: int, b: int, opts: CommOptions, size: int,
                 best: bool = False) -> tuple[float, float, int]:
    """This rank's half of pair (a, b): each direction's bandwidth (kept by its receiver), then latency.
    Returns what this rank received: Gbps, one-way latency in microseconds, wrong elements; `best`: the
    fastest message and round trip, not the typical one."""
    dtype = dtype_named(opts.dtype)
    count = max(1, size // dtype.itemsize)
    values = Values(dtype, worker.device, None, worker.world_size, zeros=False)
    peer = b if worker.rank == a else a
    link = _Link(worker.rank, peer, count, values, worker.device)
    iters = opts.iters or BW_ITERS
    received = None
    for src in (a, b):
        got = link.stream(src, iters, best)
        received = got if got is not None else received
    assert received is not None  # one of the two directions comes into this rank
    small = max(1, opts.min_bytes // dtype.itemsize)
    one_way = link.ping(worker.rank == a, small, LATENCY_ITERS, best)
    seconds, wrong = received
    return message_bytes(opts, size) * 8 / seconds / 1e9, one_way * 1e6, wrong


def message_bytes(opts: CommOptions, size: int) -> int:
    """The bytes a pair's message holds: `size` in whole elements of the sweep's dtype."""
    itemsize = dtype_named(opts.dtype).itemsize
    return max(1, size // itemsize) * itemsize


def run_pairwise(rank: Rank, opts: CommOptions) -> None:
    worker = rank.worker
    nodes = scopes.node_order(list(worker.members))
    players = [ranks[0] for ranks in nodes.values()] if opts.nodes_only else list(range(worker.world_size))
    if len(players) < 2:
        raise UsageError("--nodes-only: the job runs on one node, so there is no pair of nodes to measure")
    size = opts.max_bytes or PAIR_BYTES.get(worker.device.type, PAIR_BYTES["cpu"])
    who = f"{len(players)} {'nodes (one rank each)' if opts.nodes_only else 'ranks'} on {len(nodes)} node(s)"
    schedule = rounds(len(players))
    rank.say(f"# clusterbench comm --pattern pairwise: {who}, {len(schedule)} round{'s' * (len(schedule) > 1)} of "
             f"disjoint pairs, {size} B each way, backend {worker.backend}")
    measure_rounds(rank, players, opts, size, schedule)
    if rank.folder is not None:
        rank.say(table.pair_summary(PAIRS.of(rank.folder.run), opts.unit, opts.flag_below))


def measure_rounds(rank: Rank, players: list[int], opts: CommOptions, size: int, schedule: list[list[tuple[int, int]]],
                   phase: str = "pairwise", best: bool = False,
                   keep: Callable[[list[PairRow]], None] | None = None) -> list[PairRow]:
    """The pairs of `players` (ranks, by their index in it) round by round, `size` bytes each way; each
    receiver's figures go to rank 0 as numbers in one reduce per round, and every rank waits at the end of
    each round, so a pair never shares its links with the next round's. Rank 0 hands each round's rows to
    `keep` as the round ends (by default: appended to pairs.csv, and the round said done), and returns every
    row; the other ranks keep nothing and return []. `best`: each pair's fastest message and round trip (a
    retest's question), rows of round 0."""
    worker, folder = rank.worker, rank.folder
    node_of = {m.rank: m.node for m in worker.members}
    nbytes = message_bytes(opts, size)
    started = time.monotonic()
    found: list[PairRow] = []
    playing = worker.rank in players
    if not playing:
        rank.progress.at(f"{phase} rounds, none of them this rank's")  # one note, not one a round
    for i, pairs in enumerate(schedule, 1):
        if not pairs:
            continue
        if playing:
            rank.progress.at(f"{phase} round {i}/{len(schedule)}")
        slots = torch.zeros(2 * len(pairs), 3, dtype=torch.float64, device=worker.device)
        for q, (x, y) in enumerate(pairs):
            a, b = players[x], players[y]
            if worker.rank in (a, b):
                slots[2 * q + (worker.rank == a)] = torch.tensor(measure_pair(worker, a, b, opts, size, best),
                                                                 dtype=torch.float64)
        dist.reduce(slots, dst=0)
        dist.barrier()  # the end of the round for every rank
        if worker.rank != 0:
            continue
        rows = round_rows(slots.tolist(), pairs, players, node_of, nbytes, 0 if best else i)
        found += rows
        if keep is not None:
            keep(rows)
        elif folder is not None:
            folder.extend("pairs", rows)
            rank.say(f"# round {i}/{len(schedule)} done after {time.monotonic() - started:.1f} s")
    return found


def share_rounds(worker: Worker, schedule: list[list[tuple[int, int]]] | None) -> list[list[tuple[int, int]]]:
    """Rank 0's rounds of pairs (`schedule`, None elsewhere) on every rank, as numbers: their count, then one
    (round, a, b) row per pair, broadcast from rank 0. Rank 0 alone holds what they were planned from."""
    flat = [(i, a, b) for i, pairs in enumerate(schedule or []) for a, b in pairs]
    size = torch.tensor([len(flat), len(schedule or [])], dtype=torch.int64, device=worker.device)
    dist.broadcast(size, src=0)
    count, nrounds = size.tolist()
    table = torch.tensor(flat, dtype=torch.int64, device=worker.device).reshape(-1, 3) if worker.rank == 0 else \
        torch.empty(count, 3, dtype=torch.int64, device=worker.device)
    if count:
        dist.broadcast(table, src=0)
    shared: list[list[tuple[int, int]]] = [[] for _ in range(nrounds)]
    for i, a, b in table.tolist():
        shared[i].append((a, b))
    return shared


def share_figure(worker: Worker, value: float | None) -> float:
    """Rank 0's figure (`value`, None elsewhere) on every rank."""
    t = torch.tensor([value or 0.0], dtype=torch.float64, device=worker.device)
    dist.broadcast(t, src=0)
    return t.item()
