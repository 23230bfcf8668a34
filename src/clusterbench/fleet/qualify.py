"""The fleet's work on every rank (docs/methodology.md §16): the node-local phase (each node's
picture, facts, figures and numerics, every node at once), the nodes whose figures fell out of the
fleet's band measured again alone, the pairwise rounds between nodes (one rank each), the retests,
and with --global the all_reduce across nodes. Rank 0 records each part as it arrives, so a node
that dies takes nothing measured with it.
"""

from __future__ import annotations

import time

import torch.distributed as dist

from clusterbench.analyse import bands
from clusterbench.comm import pairwise, scopes
from clusterbench.comm.pairwise import PAIR_BYTES, measure_rounds
from clusterbench.errors import UsageError
from clusterbench.fleet import links, local
from clusterbench.fleet.options import ONE_NODE, FleetOptions
from clusterbench.rank import Rank
from clusterbench.results.fleet import Fleet
from clusterbench.results.schema import CommOptions


def qualify(rank: Rank, plan: FleetOptions) -> None:
    worker = rank.worker
    nodes = scopes.node_order(list(worker.members))
    if len(nodes) < 2:
        if plan.one_node_ok:
            rank.say("# fleet: the job runs on one node: no fleet to compare")
            return
        raise UsageError(ONE_NODE)
    fleet = Fleet(pair_bar=plan.pair_bar, tolerance=plan.tolerance)
    if len(nodes) == 2:
        fleet.note = "two nodes cannot vote: a difference between them names both as suspects, neither as at fault"
    rank.say(f"# clusterbench fleet: {len(nodes)} nodes, {worker.world_size} ranks, backend {worker.backend}")
    if rank.folder is not None:
        rank.folder.record(fleet=fleet)  # a node lost from here on is judged against this run
    groups = local.node_groups(nodes)
    clock = _Clock(rank, fleet)

    rank.progress.at("the node-local phase")
    rank.say("# node-local phase: every node's picture, facts, peaks and numerics at once")
    parts = _gathered(rank, local.measure(worker, nodes, groups, plan.peak_seconds, plan.numerics_steps))
    if rank.folder is not None:
        fleet.probes, fleet.numerics = local.assemble(parts, nodes)
        rank.folder.record(fleet=fleet)
        for p in fleet.probes:
            rank.say(f"#   {p.node}: " + ", ".join(f"{bands.METRICS[k]} {v:.3g}" for k, v in p.metrics.items()))
    clock.lap("node-local")

    rank.progress.at("the node-local rechecks")
    figures = {p.node: (p.klass, p.metrics) for p in fleet.probes}
    again = [sorted(bands.outliers(figures, bands.learn_all(figures, plan.tolerance), plan.tolerance))]
    dist.broadcast_object_list(again, src=0)  # rank 0 alone holds the probes
    if again[0]:
        rank.say(f"# measured again alone: {', '.join(again[0])}")
        chosen = {n: nodes[n] for n in again[0]}
        parts = _gathered(rank, local.measure(worker, chosen, groups, plan.peak_seconds, 0))
        if rank.folder is not None:
            fleet.rechecks = {p.node: p.metrics for p in local.assemble(parts, chosen)[0]}
            rank.folder.record(fleet=fleet)
    clock.lap("rechecks")

    leaders = [ranks[0] for ranks in nodes.values()]
    opts = CommOptions(iters=plan.pair_iters, flag_below=plan.pair_bar, nodes_only=True)
    size = plan.pair_bytes or PAIR_BYTES.get(worker.device.type, PAIR_BYTES["cpu"])
    rank.say(f"# pairwise phase: {len(nodes)} nodes, {len(pairwise.rounds(len(nodes)))} rounds of disjoint pairs, "
             f"{size} B each way")
    rows = measure_rounds(rank, leaders, opts, size, phase="the pairwise phase,")
    clock.lap("pairwise")
    links.retest(rank, rows, nodes, opts, size, fleet)
    clock.lap("retests")
    if plan.whole:
        links.whole_and_search(rank, rows, nodes, size, plan.pair_bar, fleet)
        clock.lap("global")


class _Clock:
    """Each phase's seconds, kept in the fleet's record on rank 0: where a fleet's time goes."""

    def __init__(self, rank: Rank, fleet: Fleet) -> None:
        self.rank, self.fleet, self.last = rank, fleet, time.monotonic()

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        if self.rank.folder is not None:
            self.fleet.seconds[phase] = now - self.last
            self.rank.folder.record(fleet=self.fleet)
        self.last = now


def _gathered(rank: Rank, part: local.Part | None) -> list[local.Part]:
    """Every rank's part, on rank 0 only (gathered, not all-gathered: a thousand nodes' pictures are
    rank 0's business alone)."""
    worker = rank.worker
    found: list[local.Part | None] = [None] * worker.world_size if worker.rank == 0 else []
    dist.gather_object(part, found if worker.rank == 0 else None, dst=0)
    return [p for p in found if p is not None]
