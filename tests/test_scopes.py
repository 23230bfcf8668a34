"""Scopes: which ranks form each team, and how teams of different sizes are compared."""

from __future__ import annotations

import os
from dataclasses import replace

from clusterbench.runtime.rendezvous import Member, named
from clusterbench.stages.comm import teams
from clusterbench.stages.comm.groups import nccl_algo
from clusterbench.stages.comm.records import CommRow
from clusterbench.stages.comm.scopes import algo_phases, plan


def members(*layout: tuple[str, int]) -> list[Member]:
    """Nodes in order, each with its rank count; ranks numbered node by node as launchers do."""
    out, rank = [], 0
    for node, count in layout:
        for local in range(count):
            out.append(Member(rank, node, local, node=node))
            rank += 1
    return out


def test_uneven_nodes_make_intra_teams_per_node_and_rails_where_two_nodes_share_a_local_rank() -> None:
    job = members(("a", 2), ("b", 3))
    intra, why = plan("intra", job)
    assert why is None and [[(t.name, t.ranks) for t in p.teams] for p in intra] == [[("a", (0, 1)), ("b", (2, 3, 4))]]
    inter, _ = plan("inter", job)
    # local rank 2 exists only on node b: a rail of one rank has no network to measure
    assert [[(t.name, t.ranks, t.nodes) for t in p.teams] for p in inter] == [[("rail 0", (0, 2), 2)],
                                                                            [("rail 1", (1, 3), 2)]]
    (glob,), _ = plan("global", job)
    assert glob.teams[0].ranks == (0, 1, 2, 3, 4) and glob.teams[0].nodes == 2


def test_rails_are_ascending_even_when_ranks_alternate_between_nodes() -> None:
    # Slurm's cyclic distribution: node a has ranks 0 and 2, node b 1 and 3.
    job = [Member(0, "a", 0, node="a"), Member(1, "b", 0, node="b"), Member(2, "a", 1, node="a"),
           Member(3, "b", 1, node="b")]
    inter, _ = plan("inter", job)
    assert [p.teams[0].ranks for p in inter] == [(0, 1), (2, 3)]


def test_scopes_that_have_nothing_to_measure_say_why() -> None:
    assert plan("inter", members(("a", 4)))[1] == "the job runs on one node: no network between nodes to measure"
    assert plan("intra", members(("a", 1), ("b", 1)))[1].startswith("every node runs one rank")


def test_namespaces_that_share_a_host_name_are_told_apart_by_the_launchers_node_index() -> None:
    job = named([Member(0, "vm", 0, "0"), Member(1, "vm", 1, "0"), Member(2, "vm", 0, "1")])
    assert [m.node for m in job] == ["vm#0", "vm#0", "vm#1"]
    assert [m.node for m in named([Member(0, "a", 0, "0"), Member(1, "b", 0, "1")])] == ["a", "b"]


ROW = CommRow("all_gather", 0, 0, "float32", 2, False, 1.0, 1.0, 1.0, 0, 5, 1.0, 1.0, 1.0, 1.0, 0.0,
              scope="intra", nodes=1)


def test_teams_of_different_sizes_are_each_taken_at_their_largest_size() -> None:
    rows = [replace(ROW, team="a", size_bytes=1048576, busbw_gbps=8.0), replace(ROW, team="a", size_bytes=512,
                                                                                 busbw_gbps=0.1),
            replace(ROW, team="b", size_bytes=1048572, world_size=3, busbw_gbps=2.0),
            replace(ROW, team="c", size_bytes=1048576, busbw_gbps=9.0)]
    worst = teams.worst(rows)
    assert (worst.row.team, worst.row.size_bytes, worst.median_gbps, worst.teams) == ("b", 1048572, 8.0, 3)
    assert worst.share == 0.25


def test_each_nccl_algorithm_gets_the_whole_job_in_a_phase_of_its_own() -> None:
    phases = algo_phases(members(("a", 2), ("b", 2)), ("ring", "tree"))
    assert [(p.scope, p.teams[0].name, p.teams[0].nccl_algo, p.teams[0].ranks) for p in phases] == [
        ("algo", "NCCL_ALGO=ring", "ring", (0, 1, 2, 3)), ("algo", "NCCL_ALGO=tree", "tree", (0, 1, 2, 3))]


def test_nccl_algo_is_set_only_while_asked(monkeypatch) -> None:
    monkeypatch.setenv("NCCL_ALGO", "mine")
    with nccl_algo("tree"):
        assert os.environ["NCCL_ALGO"] == "tree"
    assert os.environ["NCCL_ALGO"] == "mine"
    monkeypatch.delenv("NCCL_ALGO")
    with nccl_algo("ring"):
        pass
    assert "NCCL_ALGO" not in os.environ
