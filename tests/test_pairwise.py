"""--pattern pairwise: the round schedule, the flags, and the command on real gloo ranks."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from conftest import assert_one_line_error, read_pairs, read_run, run_cli

from clusterbench.stages.comm.pairs import flags
from clusterbench.stages.comm.records import PairRow
from clusterbench.stages.comm.schedule import rounds


@pytest.mark.parametrize("n", range(2, 10))
def test_every_pair_once_in_rounds_of_disjoint_pairs(n: int) -> None:
    schedule = rounds(n)
    assert len(schedule) == (n - 1 if n % 2 == 0 else n)
    seen = [pair for pairs in schedule for pair in pairs]
    assert sorted(seen) == list(itertools.combinations(range(n), 2))
    for pairs in schedule:
        busy = [r for pair in pairs for r in pair]
        assert len(busy) == len(set(busy))


def row(src: int, dst: int, gbps: float, nodes: list[str]) -> PairRow:
    return PairRow(src, dst, nodes[src], nodes[dst], 1 << 20, gbps, 20.0, 0)


def matrix(nodes: list[str], speed) -> list[PairRow]:
    return [row(s, d, speed(s, d), nodes) for s, d in itertools.permutations(range(len(nodes)), 2)]


def test_a_node_that_sends_slowly_is_flagged_and_its_peers_are_not() -> None:
    nodes = ["a", "a", "b", "b", "c", "c"]
    found = flags(matrix(nodes, lambda s, d: 0.2 if nodes[s] == "c" and nodes[d] != "c" else 10.0), 0.8)
    wholes = [(f.what, f.name, f.direction) for f in found if f.what != "pair"]
    assert wholes == [("node", "c", "send")]  # not its ranks again, not the nodes it sends to
    assert {f.name for f in found if f.what == "pair"} == {f"{s} -> {d} (c -> {nodes[d]})" for s in (4, 5)
                                                           for d in range(4)}
    assert "node c sends at 0.200 Gbps (8 pairs), 0.02x the 10.000 Gbps median across nodes" in found[0].text()


def test_a_slow_rank_inside_a_node_is_judged_against_its_own_class() -> None:
    nodes = ["a", "a", "a", "b", "b", "b"]
    # Within a node 50 Gbps, across 10; rank 1 receives slowly from its node mates only.
    found = flags(matrix(nodes, lambda s, d: (5.0 if d == 1 else 50.0) if nodes[s] == nodes[d] else 10.0), 0.8)
    assert [(f.what, f.name, f.direction) for f in found if f.what != "pair"] == [("rank", "1 (a)", "receive")]


def test_an_even_network_flags_nothing() -> None:
    assert flags(matrix(["a", "b", "c", "d"], lambda s, d: 9.5 + (s + d) % 2), 0.8) == []


def test_pairwise_on_three_ranks_writes_the_matrix(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("comm", "--nproc", "3", "--pattern", "pairwise", "-e", "64K", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = read_run(out)
    pairs = read_pairs(out)
    assert sorted((p["src"], p["dst"]) for p in pairs) == list(itertools.permutations(range(3), 2))
    assert all(p["wrong"] == 0 and p["gbps"] > 0 and p["latency_us"] > 0 for p in pairs)
    assert {p["round"] for p in pairs} == {1, 2, 3} and doc["pair_rows"] == 6
    assert "# pairwise Gbps (row sends, column receives)" in proc.stdout and "round 3/3" in proc.stdout
    assert (out / "pairs.csv").read_text().startswith("src,dst,src_node,dst_node,size_bytes,gbps,latency_us")


@pytest.mark.parametrize("args, code, needle", [
    (("--nproc", "2", "--pattern", "pairwise", "--nodes-only"), 2, "no pair of nodes"),
    (("--nproc", "1", "--pattern", "pairwise"), 2, "needs at least 2 ranks"),
    (("--nproc", "2", "--nodes-only"), 2, "--nodes-only belongs to --pattern pairwise"),
    (("--nproc", "2", "--pattern", "ring", "--ops", "all_reduce"), 2, "drop --ops"),
    (("--nproc", "2", "--pattern", "pairwise", "--flag-below", "2"), 2, "--flag-below"),
])
def test_pattern_misuse_is_one_line(args: tuple[str, ...], code: int, needle: str, tmp_path: Path) -> None:
    assert_one_line_error(run_cli("comm", *args, "--out", str(tmp_path / "run")), code, needle)
