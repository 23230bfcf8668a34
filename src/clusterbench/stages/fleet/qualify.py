"""The fleet's work on every rank (docs/methodology.md §16): the node-local phase (each node's
picture, facts, figures and numerics, every node at once), with --burnin every device soaked for a
duration (burnin/), the nodes whose figures fell out of the fleet's band measured again alone, the
pairwise rounds between nodes (one rank each), the retests, and with --global the all_reduce across
nodes. Rank 0 records each part as it arrives, so a node
that dies takes nothing measured with it.
"""

from __future__ import annotations

import secrets
import time

import torch.distributed as dist

from clusterbench.errors import UsageError
from clusterbench.inputs.topology import Topology
from clusterbench.nodechecks import bands
from clusterbench.nodechecks.table import BANDED
from clusterbench.runtime.rank import Rank
from clusterbench.stages.burnin.plan import BurninPlan
from clusterbench.stages.burnin.soak import soak
from clusterbench.stages.comm import scopes
from clusterbench.stages.comm.pairwise import PAIR_BYTES, measure_rounds
from clusterbench.stages.comm.records import CommOptions
from clusterbench.stages.fleet import coverage, links, local
from clusterbench.stages.fleet.options import ONE_NODE, PARTNERS, FleetOptions
from clusterbench.stages.fleet.records import Fleet
from clusterbench.stages.fleet.report import SHOWN_ALL


def qualify(rank: Rank, plan: FleetOptions, topology: Topology | None = None, burnin: BurninPlan | None = None) -> None:
    worker = rank.worker
    nodes = scopes.node_order(list(worker.members))
    if len(nodes) < 2:
        if plan.one_node_ok:
            rank.say("# fleet: the job runs on one node: no fleet to compare")
            return
        raise UsageError(ONE_NODE)
    racks, seed = _agreed(rank, plan, topology, list(nodes))
    fleet = Fleet(pair_bar=plan.pair_bar, tolerance=plan.tolerance, racks=racks)
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
        for p in fleet.probes[:SHOWN_ALL]:
            rank.say(f"#   {p.node}: " + ", ".join(f"{BANDED.get(k, k)} {v:.3g}" for k, v in p.metrics.items()))
        if len(fleet.probes) > SHOWN_ALL:
            rank.say(f"#   and {len(fleet.probes) - SHOWN_ALL} more nodes (each one's figures: run.json, the report)")
    clock.lap("node-local")

    if burnin is not None:
        rank.progress.at("the burn-in")
        rank.say(f"# burn-in: every device of every node under load for {burnin.duration_s:g} s")
        soak(rank, burnin)
        clock.lap("burn-in")

    rank.progress.at("the node-local rechecks")
    figures = {p.node: (p.klass, p.metrics) for p in fleet.probes}
    again = [sorted(bands.outliers(figures, bands.learn_all(figures, plan.tolerance), plan.tolerance))]
    dist.broadcast_object_list(again, src=0)  # rank 0 alone holds the probes
    if again[0]:
        rank.say(f"# measured again alone: {', '.join(again[0])}")
        chosen = {n: nodes[n] for n in again[0]}
        parts = _gathered(rank, local.measure(worker, chosen, groups, plan.peak_seconds, 0, local.BANDED_CHECKS))
        if rank.folder is not None:  # saved with the plan of pairs, next
            fleet.rechecks = local.rechecked(parts)
    clock.lap("rechecks")

    leaders = [ranks[0] for ranks in nodes.values()]
    opts = CommOptions(iters=plan.pair_iters, flag_below=plan.pair_bar, nodes_only=True)
    size = plan.pair_bytes or PAIR_BYTES.get(worker.device.type, PAIR_BYTES["cpu"])
    schedule, fleet.coverage = coverage.plan(len(nodes), _mode(plan), plan.partners or PARTNERS, seed,
                                             [fleet.racks[n] for n in nodes] if fleet.racks else None)
    if rank.folder is not None:
        rank.folder.record(fleet=fleet)
    rank.say(f"# pairwise phase: {len(nodes)} nodes, {fleet.coverage.summary()}, {size} B each way")
    rows = measure_rounds(rank, leaders, opts, size, schedule, phase="the pairwise phase,")
    clock.lap("pairwise")
    links.retest(rank, rows, nodes, opts, size, fleet)
    clock.lap("retests")
    if plan.whole:
        links.whole_and_search(rank, rows, nodes, size, plan.pair_bar, fleet)
        clock.lap("global")


def _mode(plan: FleetOptions) -> str:
    """--pairs, or sampled where only --partners was given, or the default's choice by the fleet's size."""
    return plan.pairs if plan.pairs != "auto" else "sampled" if plan.partners is not None else "auto"


def _agreed(rank: Rank, plan: FleetOptions, topology: Topology | None, nodes: list[str]) -> tuple[dict[str, str], int]:
    """What every rank plans the rounds from, as rank 0 has it: each node's rack (rank 0's reading of --topology,
    checked against the job's nodes) and the seed (--seed, or one rank 0 draws); or the one line that refuses
    them, on every rank, before anything is measured."""
    problem, racks = None, {}
    if plan.partners is not None and plan.partners > len(nodes) - 1:
        problem = (f"--partners {plan.partners}: the fleet has {len(nodes)} nodes, so a node has {len(nodes) - 1} "
                   "partners at most")
    elif topology is not None:
        try:
            topology.check(nodes)
            racks = {n: topology.racks[n] for n in nodes}
        except UsageError as e:
            problem = str(e)
    seed = plan.seed if plan.seed is not None else secrets.randbelow(2**31)
    shared = [problem, racks, seed]
    dist.broadcast_object_list(shared, src=0)
    if shared[0] is not None:
        raise UsageError(shared[0])
    return shared[1], shared[2]


class _Clock:
    """Each phase's seconds, kept in the fleet's record on rank 0: where a fleet's time goes. Saved with the
    next save of run.json (a phase saves what it measured itself), or this one where the last lies far back."""

    def __init__(self, rank: Rank, fleet: Fleet) -> None:
        self.rank, self.fleet, self.last = rank, fleet, time.monotonic()

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        if self.rank.folder is not None:
            self.fleet.seconds[phase] = now - self.last
            self.rank.folder.record(fleet=self.fleet, min_interval_s=self.rank.folder.hot_interval_s)
        self.last = now


def _gathered(rank: Rank, part: local.Part | None) -> list[local.Part]:
    """Every rank's part, on rank 0 only (gathered, not all-gathered: a thousand nodes' pictures are
    rank 0's business alone)."""
    worker = rank.worker
    found: list[local.Part | None] = [None] * worker.world_size if worker.rank == 0 else []
    dist.gather_object(part, found if worker.rank == 0 else None, dst=0)
    return [p for p in found if p is not None]
