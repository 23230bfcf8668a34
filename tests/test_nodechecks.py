"""The one table of node checks: every entry measured by one function, the node rules judging the counters with
an action, and `check` and `fleet` reaching the same verdict on the same counters (docs/methodology.md §20)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_one_line_error, run_cli

from clusterbench.analyse import fleet as conclusion
from clusterbench.analyse import node_rules
from clusterbench.errors import UsageError
from clusterbench.nodechecks import BANDED, COUNTS, NODE_CHECKS
from clusterbench.results.findings import Finding
from clusterbench.results.fleet import Fleet, NodeProbe
from clusterbench.results.schema import Env, Placement, Run

REMAP = Finding("cuda:3", "1 row remap pending a reset", "critical", "reset the GPU", "counters.remap_pending")
DOWNTRAINED = Finding("cuda:1", "PCIe gen 4 x8, its maximum gen 5 x16", "warning", "reseat the GPU",
                      "counters.pcie_downtrained")


def test_every_node_check_is_measured_by_one_function_and_its_figures_are_banded() -> None:
    from clusterbench.fleet import measures  # torch

    assert set(measures.MEASURES) == set(NODE_CHECKS)
    for check in NODE_CHECKS.values():
        assert check.kind in ("passive", "active") and check.scope in ("device", "node", "ranks")
        assert check.kind == "active" or check.cost == 0.0  # reading counters costs the budget nothing
        assert set(check.figures) <= set(BANDED)
    # What the fleet's band judged before the table, it still judges, in the same words.
    assert {"matmul_tflops", "copy_gbps", "intra_busbw_gbps", "h2d_gbps", "d2h_gbps"} <= set(BANDED)


def test_the_shipped_node_rules_judge_every_count_and_say_what_to_do() -> None:
    rules = node_rules.load()
    judged = {p for r in rules for p in r.patterns}
    assert judged <= set(COUNTS)
    assert set(COUNTS) - judged == {"counters.xid_application"}  # an application's Xid is no fault of the node
    assert all(r.action and r.missing == "ignore" for r in rules)


def test_a_miss_names_the_findings_behind_it_and_the_rules_action() -> None:
    counts = {"counters.remap_pending": 1.0, "counters.pcie_downtrained": 1.0, "counters.ecc_uncorrected": 0.0}
    misses = node_rules.judge(counts, [DOWNTRAINED, REMAP], node_rules.load())
    assert [m.level for m in misses] == ["FAIL", "WARN"]  # the FAILs first
    assert misses[0].line == ("row remaps pending: cuda:3: 1 row remap pending a reset (reset the GPU to apply the "
                              "remap)")
    assert misses[1].line.startswith("PCIe links downtrained: cuda:1: PCIe gen 4 x8")
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
    assert verdicts["n2"][0] == "EXCLUDE" and "reset the GPU to apply the remap" in verdicts["n2"][1][0]
    assert verdicts["n3"][0] == "SUSPECT" and "cuda:1: PCIe gen 4 x8" in verdicts["n3"][1][0]
    assert [e.node for e in fleet.excluded] == ["n2"] and "row remaps pending" in fleet.excluded[0].reasons[0]


def test_check_and_fleet_refuse_a_broken_node_rules_file_before_measuring(tmp_path: Path) -> None:
    broken = tmp_path / "rules.yaml"
    broken.write_text("rules:\n  - metric: counters.link_flaps\n    criteria: 'about zero'\n")
    assert_one_line_error(run_cli("check", "--node-rules", str(broken), "--store", "off"), 2, "criteria",
                          "about zero")
    assert_one_line_error(run_cli("check", "--node-rules", str(tmp_path / "none.yaml"), "--store", "off"), 2,
                          "none.yaml")
