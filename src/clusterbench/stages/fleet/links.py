"""The links between nodes after the rounds (docs/methodology.md §16): the retests of what looked
slow, and, with --global, the all_reduce across every node (one rank each) and, where it falls
short while every pair passed, the search for the smallest set of nodes that explains it."""

from __future__ import annotations

import dataclasses
import statistics
import time

import torch
import torch.distributed as dist

from clusterbench.runtime.devices import synchronize
from clusterbench.runtime.rank import Rank
from clusterbench.stages.comm.pairwise import BW_ITERS, measure_rounds, share_figure, share_rounds
from clusterbench.stages.comm.records import CommOptions, PairRow
from clusterbench.stages.fleet import retests
from clusterbench.stages.fleet.records import Fleet, GroupFigure
from clusterbench.stages.fleet.retests import Planned

GLOBAL_ITERS = 5
# A retest keeps its fastest message of at least this many. Healthy 4-node namespace fleets run beside the test
# suite on 2 cores: of 3 messages (the quick runs' count), 27 of 202 retests stayed below the bar; of 10, 9 of 220.
# Retests are few: they can take more.
RETEST_ITERS = 10
# A pair still slow on retest is looked at again this much later, each way keeping the faster look: a busy
# host's slow moment can outlast a retest's messages, and seldom comes back for the second look (on the same
# fleets, 3 of 372 stayed below the bar, each at 0.93-0.96x); a fault does.
LOOK_APART_S = 1.0
# The whole fleet's all_reduce moves this many times a pair's message: enough for a ring's steps to be
# bandwidth-bound, and for a node that cannot keep up to show.
GLOBAL_SCALE = 4
# Each team of the search keeps the faster of this many looks: a step names the slower side, and a healthy team
# slowed for a moment by a busy host hides how slow the other is (the suite's load once measured a healthy pair of
# namespace nodes at 0.65 Gbps busbw, against 2.1 for another and 0.34 beside a starved node: under 2x apart, so
# the search named both).
SEARCH_LOOKS = 2


def retest(rank: Rank, rows: list[PairRow], nodes: dict[str, list[int]], opts: CommOptions, size: int,
           fleet: Fleet) -> None:
    """The slow pairs and the suspects against healthy partners, measured again in rounds of disjoint pairs,
    each keeping its fastest of RETEST_ITERS messages at least; the pairs still slow, looked at once more
    LOOK_APART_S later, each way keeping the faster look. Rank 0 plans both looks from the rows it alone
    holds (`rows`; [] elsewhere) and hands every rank the rounds as numbers."""
    worker = rank.worker
    names = list(nodes)
    leaders = [nodes[n][0] for n in names]
    index = {n: i for i, n in enumerate(names)}
    looks = retests.Looks(rows, names, fleet.pair_bar) if worker.rank == 0 else None
    first = share_rounds(worker, _indexed(retests.rounds_of(looks.todo), index) if looks is not None else None)
    if not first:
        return
    again = dataclasses.replace(opts, iters=max(opts.iters or BW_ITERS, RETEST_ITERS))
    if looks is not None:
        rank.say(f"# retests: {len(looks.todo)} pair(s), the fastest of {again.iters} messages each way")

    def keep(found: list[PairRow]) -> None:
        assert looks is not None and rank.folder is not None  # rank 0's hands
        looks.keep(found)
        fleet.retests = list(looks.kept.values())
        rank.folder.record(fleet=fleet, min_interval_s=rank.folder.hot_interval_s)

    measure_rounds(rank, leaders, again, size, first, "the retests", best=True, keep=keep)
    still = looks.still_slow() if looks is not None else []
    second = share_rounds(worker, _indexed(retests.rounds_of(still), index) if looks is not None else None)
    if second:
        rank.say(f"# {len(still)} pair(s) slow on retest: looked at again {LOOK_APART_S:g} s later")
        time.sleep(LOOK_APART_S)
        measure_rounds(rank, leaders, again, size, second, "the second look", best=True, keep=keep)
    if rank.folder is not None:
        rank.folder.record(fleet=fleet)


def _indexed(schedule: list[list[Planned]], index: dict[str, int]) -> list[list[tuple[int, int]]]:
    return [[(index[p.a], index[p.b]) for p in pairs] for pairs in schedule]


def whole_and_search(rank: Rank, rows: list[PairRow], nodes: dict[str, list[int]], size: int, bar: float,
                     fleet: Fleet) -> None:
    """The all_reduce across every node; where it runs below `bar` x the median pair (of rank 0's `rows`),
    halve the fleet while one half is below `bar` x the other, then test the last two nodes each beside a
    node of the fast half: the set that stays slow is the smallest that explains the whole. Each team of the
    search keeps the faster of SEARCH_LOOKS looks."""
    nbytes = size * GLOBAL_SCALE
    names = list(nodes)
    rank.progress.at("the all_reduce across nodes")
    [whole] = _all_reduce(rank, [names], nodes, nbytes)
    median = share_figure(rank.worker, statistics.median(r.gbps for r in rows) if rows else None)
    rank.say(f"# all_reduce across {len(names)} nodes (one rank each), {nbytes} B: busbw {whole.busbw_gbps:.3g} Gbps, "
             f"{whole.busbw_gbps / median if median else 0:.2f}x the median pair")
    if rank.folder is not None:
        fleet.whole = whole
        rank.folder.record(fleet=fleet)
    if not median or whole.busbw_gbps >= bar * median:
        return
    candidates, good = names, None
    while len(candidates) > 2:
        rank.progress.at(f"the search among {len(candidates)} nodes")
        half = len(candidates) // 2
        a, b = _all_reduce(rank, [candidates[:half], candidates[half:]], nodes, nbytes, SEARCH_LOOKS)
        _keep(rank, fleet, [a, b])
        if a.busbw_gbps < bar * b.busbw_gbps:
            candidates, good = a.nodes, b.nodes[0]
        elif b.busbw_gbps < bar * a.busbw_gbps:
            candidates, good = b.nodes, a.nodes[0]
        else:
            break  # both halves alike: what is slow spans them (or is every link)
    if len(candidates) == 2 and good is not None:
        rank.progress.at("the search's last pair")
        # One at a time: the good node is in both.
        first, second = (_all_reduce(rank, [[good, c]], nodes, nbytes, SEARCH_LOOKS)[0] for c in candidates)
        _keep(rank, fleet, [first, second])
        if first.busbw_gbps < bar * second.busbw_gbps:
            candidates = [candidates[0]]
        elif second.busbw_gbps < bar * first.busbw_gbps:
            candidates = [candidates[1]]
    if rank.folder is not None and len(candidates) < len(names):
        fleet.isolated = list(candidates)
        rank.folder.record(fleet=fleet)
        rank.say(f"# the all_reduce is slow because of: {', '.join(candidates)}")


def _keep(rank: Rank, fleet: Fleet, figures: list[GroupFigure]) -> None:
    if rank.folder is not None:
        fleet.search += figures
        rank.folder.record(fleet=fleet)


def _all_reduce(rank: Rank, teams: list[list[str]], nodes: dict[str, list[int]], nbytes: int,
                looks: int = 1) -> list[GroupFigure]:
    """An all_reduce in each team of nodes (one rank each, the teams at once): the median call's busbw, the
    fastest of `looks` looks LOOK_APART_S apart (noise only slows a team, as it only slows a link)."""
    worker = rank.worker
    ranks = [[nodes[n][0] for n in team] for team in teams]
    groups = [dist.new_group(r) for r in ranks]  # a collective: every rank makes every group, in one order
    best = [0.0] * len(teams)
    for look in range(looks):
        if look:
            time.sleep(LOOK_APART_S)
        mine = None
        for members, group in zip(ranks, groups):
            if worker.rank in members:
                mine = _busbw(worker.device, group, len(members), nbytes)
        everyone: list[float | None] = [None] * worker.world_size
        dist.all_gather_object(everyone, mine)
        best = [max(b, everyone[members[0]] or 0.0) for b, members in zip(best, ranks)]
    return [GroupFigure(team, b) for team, b in zip(teams, best)]


def _busbw(device: torch.device, group: object, size: int, nbytes: int) -> float:
    data = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dist.all_reduce(data, group=group)
    times = []
    for _ in range(GLOBAL_ITERS):
        synchronize(device)
        start = time.perf_counter()
        dist.all_reduce(data, group=group)
        synchronize(device)
        times.append(time.perf_counter() - start)
    # The median call, and every rank's the slowest rank's: the ring runs at its slowest member's pace.
    seconds = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX, group=group)
    return nbytes * 8 / seconds.item() / 1e9 * 2 * (size - 1) / size
