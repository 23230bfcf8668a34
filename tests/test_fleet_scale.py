"""The fleet at scale, as pure functions: the plan of pairs (every pair, or sampled partners, inside and
across racks), the judge's near-linear parts against their definitions, the retests spread over the
healthy nodes, the bad link into a suspect, a fault a rack shares named as its switch, and the
topology files (docs/methodology.md §16)."""

from __future__ import annotations

import random
import re
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterbench.errors import UsageError
from clusterbench.inputs import topology
from clusterbench.results.run import SCHEMA_VERSION, upgraded
from clusterbench.stages.comm.records import PairRow
from clusterbench.stages.comm.schedule import rounds
from clusterbench.stages.fleet import coverage, racks, retests, suspects
from clusterbench.stages.fleet.kept_median import KeptMedian
from clusterbench.stages.fleet.options import ALL_UP_TO
from clusterbench.stages.fleet.records import Retest
from clusterbench.stages.registry import sections


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.001, 100.0), min_size=1, max_size=40), st.randoms(use_true_random=False))
def test_the_kept_median_is_the_median_of_what_is_left(values: list[float], rng: random.Random) -> None:
    kept = KeptMedian(values)
    left = list(range(len(values)))
    rng.shuffle(left)
    while left:
        assert kept.median() == statistics.median(values[i] for i in left)
        kept.drop(left.pop())
    with pytest.raises(ValueError):
        kept.median()


def _learn_by_definition(rows: list[PairRow], bar: float) -> tuple[suspects.Bars, dict[str, str]]:
    """learn() as docs/methodology.md §16 says it, step by step: every median and every count taken afresh."""
    def bars(kept: list[PairRow]) -> suspects.Bars:
        return suspects.Bars(statistics.median(r.gbps for r in kept), statistics.median(r.latency_us for r in kept),
                             bar)

    nodes = {r.src_node for r in rows} | {r.dst_node for r in rows}
    found: dict[str, str] = {}
    b, kept = bars(rows), rows
    while True:
        ways: dict[tuple[str, str], list[PairRow | None]] = {}  # each pair, or None where it is not slow
        for r in kept:
            slow = r if b.slow(r.gbps, r.latency_us) else None
            ways.setdefault((r.src_node, "send"), []).append(slow)
            ways.setdefault((r.dst_node, "receive"), []).append(slow)
        # Most slow pairs first; of as many, those most nearly at one pace, then by name.
        worst = [(-len(slow), max(r.gbps for r in slow) / min(r.gbps for r in slow), node, way)
                 for (node, way), s in ways.items()
                 for slow in [[r for r in s if r is not None]]
                 if len(slow) >= 2 and 2 * len(slow) > len(s)]
        if not worst:
            return b, found
        _, _, node, way = min(worst)
        found[node] = way
        kept = [r for r in kept if node not in (r.src_node, r.dst_node)]
        if 2 * len(found) < len(nodes) and kept:
            b = bars(kept)


def _fleet(rng: random.Random, n: int) -> list[PairRow]:
    """Every pair of n nodes, some of them slow senders, receivers, starved or slow in latency; figures rounded
    so that ties and figures on the bar happen."""
    names = [f"n{i}" for i in range(n)]
    send, recv, lag = [1.0] * n, [1.0] * n, [1.0] * n
    for i in rng.sample(range(n), rng.randint(0, max(1, n // 3))):
        kind = rng.choice("srxl")
        send[i] = 0.3 if kind in "sx" else send[i]
        recv[i] = 0.3 if kind in "rx" else recv[i]
        lag[i] = 4.0 if kind in "xl" else lag[i]
    return [PairRow(a, b, names[a], names[b], 1024,
                    round(10 * min(send[a], recv[b]) * rng.choice([1, 1, 0.5, 1.04]), 1),
                    10 * max(lag[a], lag[b]) * rng.choice([1, 1, 1.2]), 0, 1)
            for a in range(n) for b in range(n) if a != b]


@pytest.mark.parametrize("seed", range(300))
def test_learning_by_explaining_away_matches_its_definition(seed: int) -> None:
    rng = random.Random(seed)
    rows = _fleet(rng, rng.randint(2, 12))
    rng.shuffle(rows)
    bar = rng.choice([0.5, 0.7])
    assert suspects.learn(rows, bar) == _learn_by_definition(rows, bar)


@pytest.mark.parametrize("n, partners", [(8, 3), (9, 4), (64, 8), (1000, 8)])
def test_sampled_pairs_give_every_node_distinct_partners_in_perfect_matchings(n: int, partners: int) -> None:
    schedule, cover = coverage.plan(n, "sampled", partners, seed=11)
    pairs = [p for r in schedule for p in r]
    assert len(pairs) == len(set(pairs)) == cover.pairs  # no pair twice
    for r in schedule:
        nodes = [x for p in r for x in p]
        assert len(nodes) == len(set(nodes))  # no node twice in a round
    met = Counter(x for p in pairs for x in p)
    assert min(met[i] for i in range(n)) >= partners == cover.partners and cover.mode == "sampled"
    assert (cover.seed, cover.possible) == (11, n * (n - 1) // 2)
    assert coverage.plan(n, "sampled", partners, seed=11)[0] == schedule  # the recorded seed draws them again
    assert coverage.plan(n, "sampled", partners, seed=12)[0] != schedule


def test_every_pair_up_to_the_cut_and_sampled_beyond_it() -> None:
    schedule, cover = coverage.plan(ALL_UP_TO, "auto", 8, seed=1)
    assert schedule == rounds(ALL_UP_TO) and cover.mode == "all" and cover.pairs == cover.possible
    schedule, cover = coverage.plan(ALL_UP_TO + 1, "auto", 8, seed=1)
    assert cover.mode == "sampled" and cover.rounds == 9  # an odd fleet: a round more, each node sits one out
    assert "every pair" in coverage.plan(4, "all", 0, 0)[1].summary()
    assert "a bad link between two healthy nodes only where it is drawn" in cover.summary()


def test_with_racks_some_rounds_pair_rackmates_and_the_rest_cross() -> None:
    names = ["a", "a", "b", "b", "c", "c"]
    schedule, cover = coverage.plan(6, "sampled", 3, seed=5, racks=names)
    assert cover.inside == 1 and cover.partners == 3
    assert sorted(schedule[0]) == [(0, 1), (2, 3), (4, 5)]  # inside the racks
    assert all(names[a] != names[b] for r in schedule[1:] for a, b in r)  # across them
    big = [f"leaf{i // 16}" for i in range(2048)]
    schedule, cover = coverage.plan(2048, "sampled", 8, seed=5, racks=big)
    inside = sum(big[a] == big[b] for r in schedule for a, b in r)
    assert cover.inside == 2 and inside >= 2 * 1024 and cover.partners >= 7


def _row(src: str, dst: str, gbps: float, nround: int = 1) -> PairRow:
    return PairRow(ord(src[0]), ord(dst[0]), src, dst, 1024, gbps, 10.0, 0, nround)


def _measured_again(plan: list[retests.Planned], figure: dict[tuple[str, str], float],
                    b: suspects.Bars) -> list[Retest]:
    return [Retest(s, d, figure.get((s, d), 8.0), 10.0, None, b.slow(figure.get((s, d), 8.0), 10.0), p.why, p.suspect)
            for p in plan for s, d in ((p.a, p.b), (p.b, p.a))]


def test_a_bad_link_into_a_suspect_on_its_normal_side_is_reported() -> None:
    """The issue's six nodes: c sends at 0.3x; e -> c runs at a tenth. c is condemned for its sends, and e -> c,
    on the side of c that is otherwise normal, is a bad link of its own."""
    figure = {("c", x): 2.4 for x in "abdef"} | {("e", "c"): 0.8}
    rows = [_row(a, b, figure.get((a, b), 8.0)) for a in "abcdef" for b in "abcdef" if a != b]
    b, found = suspects.learn(rows, 0.5)
    assert found == {"c": "send"}
    plan = retests.plan(rows, list("abcdef"), b, found)
    assert any({p.a, p.b} == {"c", "e"} for p in plan)
    verdicts = retests.judge(rows, _measured_again(plan, figure, b), list("abcdef"), 0.5)
    assert list(verdicts.condemned) == ["c"] and "sends to" in verdicts.condemned["c"][0]
    assert [t.split(":")[0] for t in verdicts.bad_links] == ["e -> c"] and "receives are otherwise normal" in \
        verdicts.bad_links[0]


def test_retests_of_many_suspects_are_spread_over_the_healthy_nodes_and_share_rounds() -> None:
    names = [f"n{i:02d}" for i in range(40)]
    slow = set(names[::5])  # 8 slow senders among 40
    rows = [PairRow(i, j, a, c, 1024, 2.0 if a in slow else 8.0, 10.0, 0, 1)
            for i, a in enumerate(names) for j, c in enumerate(names) if a != c]
    b, found = suspects.learn(rows, 0.5)
    assert set(found) == slow
    plan = retests.plan(rows, names, b, found)
    load = Counter(p.b for p in plan)
    assert max(load.values()) == 1 and len(load) == 2 * len(slow)  # 16 partners, one retest each
    assert len(retests.rounds_of(plan)) == retests.PARTNERS  # each suspect meets its two partners in turn
    verdicts = retests.judge(rows, _measured_again(plan, {(x, y): 2.0 for x in slow for y in names}, b), names, 0.5)
    assert set(verdicts.condemned) == slow and not verdicts.suspects


def test_a_suspect_never_measured_again_stays_a_suspect() -> None:
    rows = [_row(a, b, 2.0 if a == "c" else 8.0) for a in "abcde" for b in "abcde" if a != b]
    verdicts = retests.judge(rows, [], list("abcde"), 0.5)
    assert "not measured again" in verdicts.suspects["c"] and not verdicts.condemned


def test_a_fault_the_nodes_of_a_rack_share_is_named_as_their_switch() -> None:
    names = [f"n{i}" for i in range(12)]
    rack = {n: f"leaf{i // 3}" for i, n in enumerate(names)}

    def gbps(a: str, c: str) -> float:
        return 2.4 if rack[a] == "leaf3" and rack[c] != "leaf3" else 8.0

    rows = [PairRow(i, j, a, c, 1024, gbps(a, c), 10.0, 0, 1) for i, a in enumerate(names)
            for j, c in enumerate(names) if a != c]
    b, found = suspects.learn(rows, 0.5)
    plan = retests.plan(rows, names, b, found)
    again = _measured_again(plan, {(x, y): gbps(x, y) for x in names for y in names}, b)
    verdicts = retests.judge(rows, again, names, 0.5)
    assert sorted(verdicts.condemned) == ["n10", "n11", "n9"]
    [(switch, (text, nodes))] = racks.shared(rows, rack, verdicts).items()
    assert switch == "leaf3" and sorted(nodes) == ["n10", "n11", "n9"]
    assert text.startswith("leaf3: 3 of its 3 nodes send at 0.30x across the spine") and \
        text.endswith("inside the rack they are normal (8 Gbps)")
    # One bad node in a rack is that node's fault, not its switch's.
    assert racks.shared(rows, {n: f"leaf{i // 6}" for i, n in enumerate(names)}, verdicts) == {}


def test_version_6_retests_learn_their_suspect_and_probes_drop_the_picture() -> None:
    doc = {"schema_version": 6, "pairs": [{"src": 0}, {"src": 1}], "fleet": {
        "probes": [{"node": "a", "hardware": {"hostname": "a"}, "facts": {}}],
        "retests": [{"why": "suspect gpu-7 against healthy gpu-1"}, {"why": "slow in round 3"}]}}
    up = upgraded(doc, 6, sections())
    assert up["schema_version"] == SCHEMA_VERSION and up["pair_rows"] == 2
    assert [t.get("suspect") for t in up["fleet"]["retests"]] == ["gpu-7", None]
    assert "hardware" not in up["fleet"]["probes"][0]


SLURM = """# topology.conf
SwitchName=leaf1 Nodes=gpu[001-004]
SwitchName=leaf2 Nodes=gpu[005-008] LinkSpeed=100
SwitchName=spine Switches=leaf[1-2]
"""


def test_topology_files_of_both_forms(tmp_path: Path) -> None:
    slurm = tmp_path / "topology.conf"
    slurm.write_text(SLURM)
    found = topology.read(slurm)
    assert found.slurm and found.racks["gpu003"] == "leaf1" and found.racks["gpu008"] == "leaf2"
    found.check([f"gpu00{i}" for i in range(1, 7)])  # the cluster's file, a part of it in the job
    plain = tmp_path / "racks.txt"
    plain.write_text("gpu[01-02] rack-a  # the first rack\n\ngpu03 rack-b\ngpu04 rack-b\n")
    found = topology.read(plain)
    assert not found.slurm and found.racks == {"gpu01": "rack-a", "gpu02": "rack-a", "gpu03": "rack-b",
                                               "gpu04": "rack-b"}


@pytest.mark.parametrize("text, needle", [
    ("gpu01 a\ngpu01 b\n", "line 2: node gpu01 is already under a (line 1)"),
    ("SwitchName=s1 Nodes=n[1-2]\nSwitchName=s2 Nodes=n2\n", "line 2: node n2 is already under s1"),
    ("gpu01 a b\n", "line 1: expected a node (or host list) and its switch"),
    ("SwitchName=s1 Nodes=n1\nnonsense here\n", "line 2: expected SwitchName=NAME"),
    ("SwitchName=s1 Nodes=n[a-c]\n", "line 1: malformed host list 'n[a-c]'"),
    ("n[1-700000] a\n", "line 1: host list 'n[1-700000]' names 700000 hosts"),
    ("# nothing\n\n", "places no node under a switch"),
    ("n[1-40000] a\nm[1-40000] b\n", "line 2: more than 65536 nodes"),
    ("\x00\xff\xfe", "not UTF-8 text"),
])
def test_a_damaged_topology_file_is_one_line(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "topo"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(UsageError, match=None) as e:
        topology.read(path)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_topology_must_place_the_job_and_a_plain_list_only_the_job(tmp_path: Path) -> None:
    path = tmp_path / "racks.txt"
    path.write_text("n1 a\nn2 a\nn9 b\n")
    found = topology.read(path)
    with pytest.raises(UsageError, match="it names n9, which this job does not have"):
        found.check(["n1", "n2"])
    with pytest.raises(UsageError, match="places no switch above n3 of this job"):
        found.check(["n1", "n2", "n3", "n9"])


def test_the_scale_simulator_drives_the_real_judge_and_finds_its_planted_faults() -> None:
    """bench/bench_fleet_scale.py runs rank 0's own code over a synthetic fleet (BENCHMARKS.md's figures come
    from it): a fleet of 32 with 10 % faulty nodes is judged without a false or a missed exclusion, in its form."""
    bench = Path(__file__).resolve().parents[1] / "bench" / "bench_fleet_scale.py"
    proc = subprocess.run([sys.executable, str(bench), "--nodes", "32", "--seeds", "1", "--faults", "0.1"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"nodes 32: judge [\d.]+ s, rank-0 peak \d+ MiB, false 0, missed 0, "
                        r"qualify at 400 Gbps [\d.]+ min", last), proc.stdout[-2000:]
