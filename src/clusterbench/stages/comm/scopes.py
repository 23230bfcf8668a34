"""Scopes: which ranks measure a collective together (docs/methodology.md §8).

global  the whole job, as nccl-tests runs it.
intra   each node's ranks among themselves, every node at once: what the links inside a node
        give, one row set per node, and the worst node named.
inter   one rank per node, the same local rank on each ("rail k"), one rail at a time: what the
        network alone gives, and, on nodes with a NIC per GPU, each rail on its own.
algo    (--nccl-algo) the whole job once per NCCL algorithm, side by side.

A phase is the teams that run at the same time; the phases of a scope run one after another.
Planning them needs no process group; stages/comm/groups.py gives each team its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from clusterbench.runtime.rendezvous import Member

WHOLE_JOB = "all"


@dataclass(frozen=True)
class Team:
    scope: str
    name: str  # "all", a node's name, "rail k"
    ranks: tuple[int, ...]  # global ranks, ascending: the order torch gives a group's ranks
    nodes: int  # how many nodes the team spans
    group: Any = None  # its process group; None: the whole job
    nccl_algo: str | None = None  # the NCCL_ALGO its communicator is set up with (scope "algo")

    def rank_of(self, rank: int) -> int | None:
        return self.ranks.index(rank) if rank in self.ranks else None


@dataclass(frozen=True)
class Phase:
    scope: str
    teams: tuple[Team, ...]

    def team_of(self, rank: int) -> Team | None:
        return next((t for t in self.teams if rank in t.ranks), None)


def node_order(members: list[Member]) -> dict[str, list[int]]:
    """Each node's ranks, nodes in the order of their first rank."""
    nodes: dict[str, list[int]] = {}
    for m in sorted(members, key=lambda m: m.rank):
        nodes.setdefault(m.node, []).append(m.rank)
    return nodes


def whole_job(members: list[Member]) -> Team:
    return Team("global", WHOLE_JOB, tuple(range(len(members))), len(node_order(members)))


def algo_phases(members: list[Member], algos: tuple[str, ...]) -> list[Phase]:
    """--nccl-algo: the whole job once per NCCL algorithm, each in a group of its own, since NCCL
    picks up NCCL_ALGO when it sets up a communicator, not per call."""
    whole = whole_job(members)
    return [Phase("algo", (replace(whole, scope="algo", name=f"NCCL_ALGO={a}", nccl_algo=a),)) for a in algos]


def plan(scope: str, members: list[Member]) -> tuple[list[Phase], str | None]:
    """The phases of one scope (teams without process groups yet), or none and the reason why."""
    nodes = node_order(members)
    if scope == "global":
        return [Phase(scope, (whole_job(members),))], None
    if scope == "intra":
        teams = tuple(Team(scope, node, tuple(ranks), 1) for node, ranks in nodes.items() if len(ranks) > 1)
        if not teams:
            return [], "every node runs one rank: no link inside a node to measure"
        return [Phase(scope, teams)], None
    if len(nodes) < 2:
        return [], "the job runs on one node: no network between nodes to measure"
    local = {m.rank: m.local_rank for m in members}
    rails = sorted({local[r] for ranks in nodes.values() for r in ranks})
    phases = []
    for k in rails:
        ranks = tuple(sorted(r for node_ranks in nodes.values() for r in node_ranks if local[r] == k))
        if len(ranks) > 1:
            phases.append(Phase(scope, (Team(scope, f"rail {k}", ranks, len(ranks)),)))
    return phases, None
