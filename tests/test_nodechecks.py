"""The one table of node checks: every entry measured by the function it names, a check added as one entry and one
rule running in `check` and `fleet`, the node rules judging the counts with each finding's action, and `check`,
`fleet` and `fleet --burnin` reaching a verdict on every finding (docs/methodology.md §20)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from conftest import assert_one_line_error, run_cli

from clusterbench.analyse.metrics import Metrics
from clusterbench.errors import UsageError
from clusterbench.nodechecks import node_rules
from clusterbench.nodechecks.table import BANDED, NODE_CHECKS, NodeCheck, counted
from clusterbench.results.findings import Finding
from clusterbench.results.run import Env, Placement, Run
from clusterbench.runtime.rendezvous import Member
from clusterbench.stages.burnin.metrics import judge_soak
from clusterbench.stages.burnin.records import Burnin, NodeCounters
from clusterbench.stages.fleet import conclusion
from clusterbench.stages.fleet.records import Fleet, NodeProbe

REMAP = Finding("cuda:3", "1 row remap pending a reset", "critical", "reset the GPU", "counters.remap_pending")
DOWNTRAINED = Finding("cuda:1", "PCIe gen 4 x8, its maximum gen 5 x16", "warning", "reseat the GPU",
                      "counters.pcie_downtrained")
FLAPS = Finding("eth0", "carrier changes grew by 4 in 60.0 s: 2 link flaps", "critical", "check the cable",
                "counters.link_flaps")


def test_every_node_check_is_measured_by_the_function_it_names_and_its_figures_are_banded() -> None:
    from clusterbench.nodechecks import measures  # torch

    for check in NODE_CHECKS.values():
        assert callable(measures.measure_of(check)), check.name
        assert check.kind in ("passive", "active") and check.scope in ("device", "node", "ranks")
        assert check.kind == "active" or check.cost == 0.0  # reading counters costs the budget nothing
        assert set(check.figures) <= set(BANDED) and check.summary
    # What the fleet's band judged before the table, it still judges, in the same words; and the GPU-to-GPU copies.
    assert {"matmul_tflops", "copy_gbps", "intra_busbw_gbps", "h2d_gbps", "d2h_gbps", "p2p_min_gbps"} <= set(BANDED)


def test_the_shipped_node_rules_judge_every_count_and_a_rule_of_no_count_is_refused(tmp_path: Path) -> None:
    rules = node_rules.load()
    judged = {p for r in rules for p in r.patterns}
    assert judged <= set(counted())
    assert set(counted()) - judged == {"counters.xid_info"}  # an application's Xid is no fault of the node
    assert all(r.missing == "ignore" and not r.action for r in rules)  # each finding carries its own action
    typo = tmp_path / "typo.yaml"
    typo.write_text('rules:\n  - name: flaps\n    metric: counters.link_flap\n    criteria: "== 0"\n')
    with pytest.raises(UsageError, match="rule 'flaps' judges counters.link_flap, which no node check counts"):
        node_rules.load(typo)


def test_a_miss_names_the_findings_behind_it_each_with_its_action() -> None:
    counts = {"counters.remap_pending": 1.0, "counters.pcie_downtrained": 1.0, "counters.ecc_uncorrected": 0.0}
    misses = node_rules.judge(counts, [DOWNTRAINED, REMAP], node_rules.load())
    assert [m.level for m in misses] == ["FAIL", "WARN"]  # the FAILs first
    assert misses[0].line == "row remaps pending: cuda:3: 1 row remap pending a reset (reset the GPU)"
    assert misses[1].line == "PCIe links downtrained: cuda:1: PCIe gen 4 x8, its maximum gen 5 x16 (reseat the GPU)"
    # Counters the node does not have are not judged, whatever the shipped rules name.
    assert node_rules.judge({}, [], node_rules.load()) == []


def test_a_team_changes_a_limit_a_level_or_an_action_in_its_own_file(tmp_path: Path) -> None:
    mine = tmp_path / "node_rules.yaml"
    mine.write_text('rules:\n  - name: flaps\n    metric: counters.link_flaps\n    criteria: "<= 2"\n'
                    "    level: WARN\n    missing: ignore\n    action: call the network team\n")
    rules = node_rules.load(mine)
    assert node_rules.judge({"counters.link_flaps": 2.0}, [], rules) == []
    (miss,) = node_rules.judge({"counters.link_flaps": 3.0}, [], rules)
    assert miss.level == "WARN" and miss.line == ("flaps: counters.link_flaps = 3, the rule asks <= 2 (call the "
                                                  "network team)")
    (miss,) = node_rules.judge({"counters.link_flaps": 3.0}, [FLAPS], rules)  # the team's action after the finding's
    assert miss.line.endswith("2 link flaps (check the cable) (call the network team)")
    assert miss.action == "check the cable; call the network team"
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - metric: counters.link_flaps\n    criteria: '== 0'\n    action: [a, list]\n")
    with pytest.raises(UsageError, match="action must be text"):
        node_rules.load(bad)


def _fleet_run(nodes: list[str]) -> Run:
    ranks = [Placement(i, n, 0, "cpu") for i, n in enumerate(nodes)]
    return Run(command="fleet", status="complete", env=Env(hostname=nodes[0], ranks=ranks))


def test_the_fleet_excludes_on_a_failed_counter_and_suspects_on_a_warning() -> None:
    nodes = ["n1", "n2", "n3", "n4"]
    probes = [NodeProbe(n, [i], {}, "k", {"matmul_tflops": 1.0}) for i, n in enumerate(nodes)]
    probes[1] = NodeProbe("n2", [1], {}, "k", {"matmul_tflops": 1.0}, {"counters.remap_pending": 1.0}, [REMAP])
    probes[2] = NodeProbe("n3", [2], {}, "k", {"matmul_tflops": 1.0}, {"counters.pcie_downtrained": 1.0},
                          [DOWNTRAINED])
    fleet = conclusion.conclude(_fleet_run(nodes), Fleet(probes=probes))
    verdicts = {r.node: (r.verdict, r.reasons) for r in fleet.nodes}
    assert verdicts["n1"] == ("PASS", []) and verdicts["n4"] == ("PASS", [])
    assert verdicts["n2"][0] == "EXCLUDE" and verdicts["n2"][1][0].endswith("pending a reset (reset the GPU)")
    assert verdicts["n3"][0] == "SUSPECT" and "cuda:1: PCIe gen 4 x8" in verdicts["n3"][1][0]
    assert [e.node for e in fleet.excluded] == ["n2"] and "row remaps pending" in fleet.excluded[0].reasons[0]


def test_check_and_fleet_refuse_a_broken_node_rules_file_before_measuring(tmp_path: Path) -> None:
    broken = tmp_path / "rules.yaml"
    broken.write_text("rules:\n  - metric: counters.link_flaps\n    criteria: 'about zero'\n")
    assert_one_line_error(run_cli("check", "--node-rules", str(broken), "--store", "off"), 2, "criteria",
                          "about zero")
    assert_one_line_error(run_cli("check", "--node-rules", str(tmp_path / "none.yaml"), "--store", "off"), 2,
                          "none.yaml")


def fans(on: object) -> object:
    """The measure of a node check a test adds: a node whose fan 3 stopped."""
    from clusterbench.nodechecks import measures

    return measures.Found(counts={"counters.fans_stopped": 1.0},
                          findings=[Finding("fan 3", "stopped", "critical", "replace the fan", "counters.fans_stopped")])


def test_a_node_check_added_as_one_entry_and_one_rule_runs_in_check_and_in_fleet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clusterbench.nodechecks import health
    from clusterbench.runtime.dist import Worker
    from clusterbench.stages.fleet import local

    monkeypatch.setitem(NODE_CHECKS, "fans", NodeCheck("fans", "passive", "node", "the node's fans",
                                                       f"{__name__}:fans", counts=("counters.fans_stopped",)))
    mine = tmp_path / "node_rules.yaml"
    mine.write_text(node_rules.default_path().read_text() + '\n  - name: fans\n    metric: counters.fans_stopped\n'
                    '    criteria: "== 0"\n    level: FAIL\n')
    rules = node_rules.load(mine)
    told: list[tuple[str, object]] = []
    with pytest.raises(health.Unhealthy, match=r"^fans: fan 3: stopped \(replace the fan\)$"):
        health.run(None, None, 0.1, 0, time.monotonic() + 30, lambda kind, value: told.append((kind, value)), rules)
    assert [v for k, v in told if k == "check"] == ["devices", "counters", "peaks", "fans"]

    worker = Worker(0, 1, 0, torch.device("cpu"), "gloo", 60.0, (Member(0, "h", 0, node="n1"),))
    part = local.measure(worker, {"n1": [0]}, {}, 0.02, 0)
    probes, _ = local.assemble([part], {"n1": [0]})
    assert probes[0].counts["counters.fans_stopped"] == 1 and probes[0].metrics["matmul_tflops"] > 0
    (row,) = conclusion.conclude(_fleet_run(["n1"]), Fleet(probes=probes), counter_rules=rules).nodes
    assert row.verdict == "EXCLUDE" and "fans: fan 3: stopped (replace the fan)" in row.reasons


def test_every_finding_of_a_fleet_burn_in_reaches_a_verdict_its_counters_by_the_node_rules(tmp_path: Path) -> None:
    """What the soak found of a node excludes it or makes it a suspect; what it found of the job's all_reduce, or of
    a node the job does not name, is the fleet's own; the counters are judged by the rules the fleet was given."""
    nodes = ["n1", "n2", "n3"]
    soaked = Burnin(60.0, 1.0, counters=[NodeCounters("n2", {"counters.link_flaps": 2.0}, [FLAPS], 60.0)])
    soak = [Finding("all_reduce among 3 ranks", "all_reduce busbw Gbps fell 40% from 12.0 s on", "critical",
                    "check the links"),
            Finding("n3 cuda:0 (H100)", "clocks held down during the soak: hw_slowdown in 30% of the samples",
                    "warning", "check the cooling", node="n3"),
            Finding("rank 9 cuda:1 on n9", "1 word read back wrong", "critical", "RMA", node="n9")]
    probes = [NodeProbe(n, [i], {}, "k", {"matmul_tflops": 1.0}) for i, n in enumerate(nodes)]

    def concluded(rules: list) -> Fleet:
        found = judge_soak(soaked, None, False, rules).findings + soak
        return conclusion.conclude(_fleet_run(nodes), Fleet(probes=list(probes)), counter_rules=rules, soak=found)

    fleet = concluded(node_rules.load())
    rows = {r.node: r for r in fleet.nodes}
    assert rows["n2"].verdict == "EXCLUDE" and rows["n2"].reasons == [
        "burn-in: link flaps: eth0: carrier changes grew by 4 in 60.0 s: 2 link flaps (check the cable)"]
    assert rows["n3"].verdict == "SUSPECT" and "clocks held down" in rows["n3"].reasons[0]
    assert [f.subject for f in fleet.job_findings] == ["all_reduce among 3 ranks", "rank 9 cuda:1 on n9"]
    m = Metrics()
    conclusion.metrics(Run(sections={"fleet": fleet}), m)
    assert m.values["fleet.job_critical"] == 2 and m.values["fleet.job_warnings"] == 0
    # A team that allows two flaps a soak keeps the node; the same rules judge `fleet`'s counters and its soak's.
    allowing = tmp_path / "rules.yaml"
    allowing.write_text('rules:\n  - name: flaps\n    metric: counters.link_flaps\n    criteria: "<= 2"\n')
    assert {r.node: r.verdict for r in concluded(node_rules.load(allowing)).nodes}["n2"] == "PASS"



def alone(on: object) -> object:
    """The measure of a check done alone that a test adds: when it ran, in this process's clock."""
    from clusterbench.nodechecks import measures

    began = time.time()
    time.sleep(0.3)
    return measures.Found(figures={"began": began, "ended": time.time()})


def _node_rank(rank: int, store: str) -> dict[str, float]:
    """One of a node's two ranks, in its own process: the check done alone, in turns at the node's barrier."""
    import torch.distributed as dist

    from clusterbench.nodechecks import measures

    NODE_CHECKS["alone"] = NodeCheck("alone", "active", "device", "a check done alone", f"{__name__}:alone",
                                     alone=True)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        on = measures.On(torch.device("cpu"), "cpu", 0.3, rank, group=dist.group.WORLD, ranks=2, turn=rank)
        return measures.run_checks(on, {"device"}, ("alone",)).figures
    finally:
        dist.destroy_process_group()


def test_a_check_done_alone_is_measured_in_turns_by_a_nodes_ranks(tmp_path: Path) -> None:
    """Two real gloo ranks of one node: each measures in its own turn, the other waiting at the node's barrier, as
    `check` measures one device at a time (host-device copies through a shared PCIe switch or host memory)."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(2) as pool:
        first, second = pool.starmap(_node_rank, [(0, str(tmp_path / "store")), (1, str(tmp_path / "store"))])
    assert first["ended"] <= second["began"]
