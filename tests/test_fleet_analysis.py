"""The fleet's judgement as pure functions of what was measured: host lists, bands learned by
exclusion, retests, and the votes on facts and numerics (docs/methodology.md §16)."""

from __future__ import annotations

import pytest

from clusterbench.inputs import hostlist
from clusterbench.nodechecks import bands
from clusterbench.stages.comm.records import PairRow
from clusterbench.stages.fleet import agreement, retests, suspects
from clusterbench.stages.fleet.records import NodeProbe, Numerics, Retest


@pytest.mark.parametrize("hosts, text", [
    (["gpu-03", "gpu-17"], "gpu-[03,17]"),
    (["gpu01", "gpu02", "gpu03", "gpu07", "login1"], "gpu[01-03,07],login1"),
    (["n7", "n10", "n9", "n8"], "n10,n[7-9]"),  # 7 and 10 differ in width: Slurm would read n[7-10] as n7..n10 too
    (["rack2-node05", "rack2-node06", "rack3-node01"], "rack2-node[05-06],rack3-node01"),
    (["node1.cluster.org", "node2.cluster.org"], "node1.cluster.org,node2.cluster.org"),  # brackets end a name
    (["login", "a-b-c", "x9y"], "a-b-c,login,x9y"),
    (["gpu3", "gpu3"], "gpu3"),
])
def test_host_lists_compress_as_slurm_reads_them(hosts: list[str], text: str) -> None:
    assert hostlist.compress(hosts) == text
    assert sorted(hostlist.expand(text)) == sorted(set(hosts))


def test_no_hosts_compress_to_nothing_which_is_no_host_list() -> None:
    assert hostlist.compress([]) == ""
    with pytest.raises(ValueError, match="malformed host list '': it names no host"):
        hostlist.expand("")


def test_a_host_range_that_is_not_numbers_is_refused() -> None:
    with pytest.raises(ValueError, match=r"malformed host list 'gpu\[a-c\]'"):
        hostlist.expand("gpu[a-c]")


def test_identical_nodes_have_a_zero_spread_and_nobody_falls_out() -> None:
    band = bands.learn("k", "matmul_tflops", {f"n{i}": 1.0 for i in range(5)}, tolerance=0.1)
    assert (band.median, band.spread, band.nodes) == (1.0, 0.0, 5)
    assert not bands.out_of(band, 0.95, 0.1)  # 5 % off: within the tolerance, not 4 x a zero spread
    assert bands.out_of(band, 0.85, 0.1)


def test_the_band_is_learned_without_the_nodes_that_break_it() -> None:
    values = {"a": 10.0, "b": 10.2, "c": 9.9, "d": 10.1, "e": 2.0, "f": 1.0}
    band = bands.learn("k", "copy_gbps", values, tolerance=0.1)
    assert band.nodes == 4 and 9.9 <= band.median <= 10.2
    probes = {n: ("k", {"copy_gbps": v}) for n, v in values.items()}
    assert bands.outliers(probes, [band], 0.1) == {"e": ["copy_gbps"], "f": ["copy_gbps"]}


def test_a_band_of_two_nodes_judges_nobody() -> None:
    probes = {"a": ("k", {"copy_gbps": 10.0}), "b": ("k", {"copy_gbps": 1.0})}
    assert bands.outliers(probes, bands.learn_all(probes, 0.1), 0.1) == {}


def _row(src: str, dst: str, gbps: float, latency: float = 10.0, nround: int = 1) -> PairRow:
    index = {n: i for i, n in enumerate("abcdefgh")}
    return PairRow(index[src], index[dst], src, dst, 1024, gbps, latency, 0, nround)


def _rounds(nodes: str, slow_sender: str = "", slow_pair: tuple[str, str] = ("", "")) -> list[PairRow]:
    rows = []
    for a in nodes:
        for b in nodes:
            if a != b:
                slow = a == slow_sender or (a, b) == slow_pair
                rows.append(_row(a, b, 0.2 if slow else 8.0))
    return rows


def _retest(rows: list[PairRow], plan: list[retests.Planned], slow_sender: str = "") -> list[Retest]:
    b, _ = suspects.learn(rows, 0.5)
    out = []
    for p in plan:
        for src, dst in ((p.a, p.b), (p.b, p.a)):
            gbps = 0.2 if src == slow_sender else 8.0
            out.append(Retest(src, dst, gbps, 10.0, None, b.slow(gbps, 10.0), p.why, p.suspect))
    return out


def test_a_node_slow_against_two_healthy_partners_is_condemned_and_nobody_else() -> None:
    rows = _rounds("abcdef", slow_sender="c")
    plan = retests.plan(rows, list("abcdef"), *suspects.learn(rows, 0.5))
    assert {frozenset(p[:2]) for p in plan} == {frozenset("ca"), frozenset("cb")}
    found = retests.judge(rows, _retest(rows, plan, slow_sender="c"), list("abcdef"), 0.5)
    assert list(found.condemned) == ["c"] and "sends to" in found.condemned["c"][0]
    assert not found.flaky and not found.bad_links


def test_two_bad_nodes_of_five_are_both_condemned_though_they_hold_most_pairs() -> None:
    """c sends at 0.2 Gbps, e runs at 1 Gbps both ways: 11 of the 20 pairs are theirs, so the median of
    every pair is one of e's (1 Gbps) and e would pass against it; c's pairs set aside, e is found."""
    rows = [_row(a, b, 0.2 if a == "c" else 1.0 if "e" in (a, b) else 8.0) for a in "abcde" for b in "abcde" if a != b]
    b, found = suspects.learn(rows, 0.5)
    assert b.gbps == 8.0 and found == {"c": "send", "e": "receive"}
    plan = retests.plan(rows, list("abcde"), *suspects.learn(rows, 0.5))
    again = [Retest(src, dst, g, 10.0, None, b.slow(g, 10.0), p.why, p.suspect) for p in plan
             for src, dst in ((p.a, p.b), (p.b, p.a))
             for g in [0.2 if src == "c" else 1.0 if "e" in (src, dst) else 8.0]]
    found = retests.judge(rows, again, list("abcde"), 0.5)
    assert sorted(found.condemned) == ["c", "e"] and not found.suspects, found


def test_a_pair_slow_once_and_normal_on_retest_is_flaky_not_a_bad_node() -> None:
    rows = _rounds("abcd", slow_pair=("a", "c"))
    plan = retests.plan(rows, list("abcd"), *suspects.learn(rows, 0.5))
    assert [p[:2] for p in plan] == [("a", "c")]
    found = retests.judge(rows, _retest(rows, plan), list("abcd"), 0.5)
    assert not found.condemned and not found.suspects and len(found.flaky) == 1
    assert found.flaky[0].startswith("a -> c")


# A fleet run on a loaded host (tests/test_fleet_netns.py), nodes a..d for node0..node3, figures as measured: node1's
# sends held to 200 Mbit/s in round 1 (round 1 pairs a-d and b-c, round 2 a-c and b-d, round 3 a-b and c-d), and
# node2's process starved by the host's other work from round 2 on, at ~2 Gbps both ways against 13-19 Gbps.
STARVED_C = {("a", "d"): 16.2, ("d", "a"): 15.1, ("b", "c"): 0.19, ("c", "b"): 14.3,
             ("a", "c"): 2.1, ("c", "a"): 2.4, ("b", "d"): 17.8, ("d", "b"): 13.6,
             ("a", "b"): 18.9, ("b", "a"): 16.4, ("c", "d"): 1.9, ("d", "c"): 2.7}


def _starved_c() -> list[PairRow]:
    rounds = {frozenset("ad"): 1, frozenset("bc"): 1, frozenset("ac"): 2, frozenset("bd"): 2, frozenset("ab"): 3,
              frozenset("cd"): 3}
    return [_row(a, b, gbps, nround=rounds[frozenset((a, b))]) for (a, b), gbps in STARVED_C.items()]


def _again(rows: list[PairRow], plan: list[retests.Planned], figures: dict[tuple[str, str], float]) -> list[Retest]:
    b, _ = suspects.learn(rows, 0.5)
    return [Retest(src, dst, figures[(src, dst)], 10.0, None, b.slow(figures[(src, dst)], 10.0), p.why, p.suspect)
            for p in plan for src, dst in ((p.a, p.b), (p.b, p.a))]


def test_a_pair_far_slower_than_its_suspects_other_pairs_is_judged_as_a_link_of_its_own() -> None:
    """c is the suspect (its receives all slow), but b -> c at 0.19 Gbps is 12x slower than c's other slow pairs
    (~2 Gbps): c does not explain it. On retest c is slow against a, normal against b: c stays a suspect, and
    b -> c, normal on retest, is reported flaky rather than set aside with c's pairs."""
    rows = _starved_c()
    b, found = suspects.learn(rows, 0.5)
    assert found == {"c": "receive"}
    plan = retests.plan(rows, list("abcd"), b, found)
    assert {frozenset(p[:2]) for p in plan} == {frozenset("ca"), frozenset("cb")}
    again = {("c", "a"): 2.6, ("a", "c"): 2.2, ("c", "b"): 14.8, ("b", "c"): 15.4}
    found = retests.judge(rows, _again(rows, plan, again), list("abcd"), 0.5)
    assert not found.condemned and list(found.suspects) == ["c"] and not found.bad_links, found
    assert [text.split(":")[0] for text in found.flaky] == ["b -> c"], found.flaky


@pytest.mark.parametrize("b_to_c, verdict", [
    (2.0, "flaky"),  # slow again, but at c's pace against a: its own fault passed, c's slowness is c's to answer
    (0.2, "bad link"),  # still 11x slower than c against a: the link's own fault, and no proof against c
])
def test_a_pair_its_suspect_does_not_explain_is_a_bad_link_only_when_still_far_slower(b_to_c: float,
                                                                                       verdict: str) -> None:
    rows = _starved_c()
    plan = retests.plan(rows, list("abcd"), *suspects.learn(rows, 0.5))
    again = {("c", "a"): 2.6, ("a", "c"): 2.2, ("c", "b"): 2.5, ("b", "c"): b_to_c}
    found = retests.judge(rows, _again(rows, plan, again), list("abcd"), 0.5)
    links = found.flaky if verdict == "flaky" else found.bad_links
    assert [text.split(":")[0] for text in links] == ["b -> c"], found
    # c slow against both partners is condemned; the far slower pair's slow retest is the link's, not c's proof.
    assert (list(found.condemned), list(found.suspects)) == ((["c"], []) if verdict == "flaky" else ([], ["c"]))


def test_a_pair_its_suspect_does_not_explain_is_measured_again_beside_the_suspects_partners() -> None:
    """Five nodes, e starved (~2 Gbps with a, b, c), d -> e held to 0.2 Gbps: e is retested against a and b, and
    d -> e on its own (e's partners are still those of lowest rank it was slow with). Normal there, d -> e is flaky,
    and e, slow again against a alone, stays a suspect."""
    figures = {("d", "e"): 0.2, ("e", "d"): 14.0}
    rows = [_row(x, y, figures.get((x, y), 2.0 if "e" in (x, y) else 15.0)) for x in "abcde" for y in "abcde" if x != y]
    plan = retests.plan(rows, list("abcde"), *suspects.learn(rows, 0.5))
    assert [p[:2] for p in plan] == [("e", "a"), ("e", "b"), ("d", "e")] and "far slower" in plan[2][2]
    again = {("e", "a"): 2.0, ("a", "e"): 2.0, ("e", "b"): 15.0, ("b", "e"): 15.0, ("d", "e"): 15.0, ("e", "d"): 15.0}
    found = retests.judge(rows, _again(rows, plan, again), list("abcde"), 0.5)
    assert list(found.suspects) == ["e"] and [text.split(":")[0] for text in found.flaky] == ["d -> e"], found


def test_two_nodes_cannot_tell_which_is_at_fault() -> None:
    rows = _rounds("ab", slow_sender="a")
    plan = retests.plan(rows, ["a", "b"], *suspects.learn(rows, 0.5))
    found = retests.judge(rows, _retest(rows, plan, slow_sender="a"), ["a", "b"], 0.5)
    assert not found.condemned and set(found.suspects) == {"a", "b"}


def test_retests_pack_into_rounds_of_disjoint_pairs() -> None:
    pairs = [retests.Planned("a", "b", ""), retests.Planned("a", "c", ""), retests.Planned("c", "d", ""),
             retests.Planned("b", "d", "")]
    schedule = retests.rounds_of(pairs)
    assert [len(r) for r in schedule] == [2, 2]
    for batch in schedule:
        names = [n for p in batch for n in (p.a, p.b)]
        assert len(names) == len(set(names))


def _probe(node: str, **facts: str) -> NodeProbe:
    return NodeProbe(node, [0], {"gpus": "8", **facts}, "k", {})


def test_the_odd_node_is_named_with_the_majority_value() -> None:
    probes = [_probe("a", driver="550"), _probe("b", driver="550"), _probe("c", driver="535"), _probe("d")]
    odd = agreement.odd_facts(probes)
    assert [(o.fact, o.nodes, o.values, o.majority, o.majority_nodes) for o in odd] == \
        [("driver", ["c"], ["535"], "550", 2)]


def test_no_majority_names_nobody() -> None:
    assert agreement.odd_facts([_probe("a", driver="1"), _probe("b", driver="2"), _probe("c", driver="3")]) == []


def test_the_numerics_vote_names_the_first_diverging_step_and_device() -> None:
    same = [1.5, 1.25, 1.125, 1.0]
    runs = [Numerics(r, f"n{r}", "cpu", list(same)) for r in range(4)]
    runs[2] = Numerics(2, "n2", "cpu", [1.5, 1.25, 1.125 + 2**-20, 1.0])
    found, unsettled = agreement.divergences(runs, {f"n{r}": "k" for r in range(4)})
    assert [(d.node, d.step, d.majority, d.voters) for d in found] == [("n2", 3, 3, 4)] and not unsettled


def test_two_devices_that_disagree_are_both_suspects() -> None:
    runs = [Numerics(0, "a", "cpu", [1.0, 2.0]), Numerics(1, "b", "cpu", [1.0, 2.5])]
    found, unsettled = agreement.divergences(runs, {"a": "k", "b": "k"})
    assert not found and set(unsettled) == {"a", "b"}


def test_the_nodes_section_reads_at_500_nodes_the_named_first_the_passing_folded() -> None:
    from clusterbench.results.documents import Band
    from clusterbench.stages.fleet.records import Exclusion, Fleet, NodeRow
    from clusterbench.stages.fleet.report import fleet_section

    rows = [NodeRow(f"gpu{i:03d}", "k", {"matmul_tflops": 700.0}, "PASS", []) for i in range(500)]
    rows[17] = NodeRow("gpu017", "k", {"matmul_tflops": 100.0}, "EXCLUDE", ["matmul TFLOP/s 100, 0.14x the median"])
    fleet = Fleet(nodes=rows, bands=[Band("k", "matmul_tflops", 700.0, 1.0, 499)],
                  excluded=[Exclusion("gpu017", rows[17].reasons)], exclude="gpu017")
    page = fleet_section(fleet)
    folded = page.index("<details><summary>499 passing nodes</summary>")
    assert page.index("gpu017") < folded and "var(--fail-bg)" in page[:folded]
    assert page.count("<tr>") == 1 + 1 + 1 + 499  # the named table's head and row, the folded table's head and rows
    assert "--exclude=gpu017" in page
