"""`clusterbench fleet` on one host: "nodes" told apart by their launcher's node index, as torchrun's
GROUP_RANK tells them (real ranks, real gloo), for what needs no network of its own: the numerics
vote, two nodes that cannot vote, a node of several ranks, and the refusals. The network's faults
are in test_fleet_netns.py."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from conftest import assert_one_line_error, finish, read_pairs, read_run, run_side_by_side, start_nodes

from clusterbench.results import outputs

QUICK = ["--pair-bytes", "256K", "--pair-iters", "3", "--peak-seconds", "0.1", "--timeout", "60"]
HOST = socket.gethostname()


def node(i: int) -> str:
    return f"{HOST}#{i}"


def test_the_numerics_vote_excludes_the_drifting_device_and_writes_the_list(tmp_path: Path) -> None:
    out, listed = tmp_path / "run", tmp_path / "exclude.txt"
    earlier = outputs.check_one(listed, outputs.OUTPUTS["exclude_out"], overwrite=False)
    listed.write_text("node-excluded-last-week\n")
    outputs.mark([earlier])  # an earlier exclude list clusterbench wrote is replaced unasked
    done = finish(start_nodes(3, ["fleet", *QUICK, "--numerics-steps", "3", "--out", str(out),
                                  "--exclude-out", str(listed), "--drain", "--dry-run"],
                              env_of=lambda n: {"CLUSTERBENCH_TEST_SDC": "1:2"}))
    rank0 = done[0]
    assert rank0.returncode == 1, rank0.stderr[-2000:]
    assert "fleet FAIL" in rank0.stderr and "Traceback" not in rank0.stderr
    fleet = read_run(out)["fleet"]
    verdicts = {row["node"]: row["verdict"] for row in fleet["nodes"]}
    assert verdicts == {node(0): "PASS", node(1): "EXCLUDE", node(2): "PASS"}, fleet["nodes"]
    [divergence] = fleet["divergences"]
    assert (divergence["node"], divergence["rank"], divergence["step"]) == (node(1), 1, 2)
    assert (divergence["majority"], divergence["voters"]) == (2, 3)
    assert listed.read_text() == f"{node(1)}\n"
    assert f"--exclude={node(1)}" in rank0.stdout
    assert f"would run: scontrol update 'nodename={node(1)}' state=drain 'reason=clusterbench: numerics" \
        in rank0.stdout
    assert (out / "report.html").is_file() and 'id="nodes"' in (out / "report.html").read_text()


def test_two_nodes_of_two_ranks_each_say_they_cannot_vote(tmp_path: Path) -> None:
    """(Two nodes that differ are both named suspects: test_fleet_analysis.py.)"""
    out = tmp_path / "run"
    done = finish(start_nodes(2, ["fleet", *QUICK, "--numerics-steps", "0", "--out", str(out)], per_node=2))
    assert done[0].returncode == 0, done[0].stderr[-2000:]
    fleet = read_run(out)["fleet"]
    assert "two nodes cannot vote" in fleet["note"] and not fleet["excluded"]
    rows = {row["node"]: row for row in fleet["nodes"]}
    assert list(rows) == [node(0), node(1)] and all(r["verdict"] != "EXCLUDE" for r in rows.values())
    # Each node's two ranks measured an all_reduce among themselves; one CPU is one device: its first rank's.
    assert all(r["metrics"]["intra_busbw_gbps"] > 0 and r["metrics"]["matmul_tflops"] > 0 for r in rows.values())
    assert [p["ranks"] for p in fleet["probes"]] == [[0, 1], [2, 3]]


def test_a_burn_in_excludes_the_node_whose_memory_flips_a_bit(tmp_path: Path) -> None:
    """fleet --burnin: the soak of `clusterbench burnin` after the node-local phase, its findings judged per node."""
    out = tmp_path / "run"
    done = finish(start_nodes(3, ["fleet", *QUICK, "--numerics-steps", "0", "--burnin", "3", "--out", str(out)],
                              env_of=lambda n: {"CLUSTERBENCH_TEST_FLIP": "1:1"}))
    assert done[0].returncode == 1, done[0].stderr[-2000:]
    doc = read_run(out)
    rows = {row["node"]: row for row in doc["fleet"]["nodes"]}
    # (A neighbour's load on these shared cores may show as a drift of another node: only the flip is certain.)
    assert rows[node(1)]["verdict"] == "EXCLUDE", rows
    flipped = [r for r in rows[node(1)]["reasons"] if "read back wrong" in r]
    assert flipped and flipped[0].startswith("burn-in: 1 word read back wrong") and "RMA" in flipped[0], rows
    # Each node's counters over the soak, read by its first rank, judged by the node rules (nothing here grew).
    assert sorted(c["node"] for c in doc["burnin"]["counters"]) == [node(i) for i in range(3)]
    assert not any("read back wrong" in r for n in (node(0), node(2)) for r in rows[n]["reasons"])
    assert {w["rank"] for w in doc["burnin"]["windows"]} == {0, 1, 2}
    assert doc["fleet"]["seconds"]["burn-in"] >= 3
    assert 'id="burnin"' in (out / "report.html").read_text()


def test_fleet_refuses_what_cannot_work(tmp_path: Path) -> None:
    damaged = tmp_path / "topology.conf"
    damaged.write_text("SwitchName=leaf1 Nodes=n[1-4]\nSwitchName=leaf2 Nodes=n[4-8]\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "run.json").write_text(json.dumps({
        "schema_version": 5, "kind": "clusterbench-run", "tool": "clusterbench", "command": "fleet",
        "status": "complete", "env": {"hostname": "x"},
        "fleet": {"bands": [{"klass": "NVIDIA H100 80GB HBM3 x8", "metric": "matmul_tflops", "median": 700.0,
                             "spread": 5.0, "nodes": 64}]}}))
    cases = {
        "one node": ["fleet", "--nproc", "2", *QUICK, "--numerics-steps", "0", "--out", str(tmp_path / "one")],
        "drain": ["fleet", "--drain", "--out", str(tmp_path / "drain")],
        "dry run alone": ["fleet", "--dry-run", "--out", str(tmp_path / "dry")],
        "other class": ["fleet", "--baseline", str(other), "--out", str(tmp_path / "class")],
        "exclude over a run": ["fleet", "--exclude-out", str(other / "run.json"), "--out", str(tmp_path / "x")],
        "one partner": ["fleet", "--partners", "1", "--out", str(tmp_path / "p1")],
        "no partner": ["fleet", "--partners", "0", "--out", str(tmp_path / "p0")],
        "seed of words": ["fleet", "--seed", "lucky", "--out", str(tmp_path / "seed")],
        "all with partners": ["fleet", "--pairs", "all", "--partners", "8", "--out", str(tmp_path / "all")],
        "no topology": ["fleet", "--topology", str(tmp_path / "nowhere.conf"), "--out", str(tmp_path / "t0")],
        "damaged topology": ["fleet", "--topology", str(damaged), "--out", str(tmp_path / "t1")],
        "burn-in of no time": ["fleet", "--burnin", "0", "--out", str(tmp_path / "b0")],
        "burn-in of words": ["fleet", "--burnin", "a while", "--out", str(tmp_path / "b1")],
    }
    done = run_side_by_side(cases, timeout=120)
    assert_one_line_error(done["one partner"], 2, "--partners", "at least 2")
    assert_one_line_error(done["no partner"], 2, "--partners", "at least 2")
    assert_one_line_error(done["seed of words"], 2, "--seed", "lucky")
    assert_one_line_error(done["all with partners"], 2, "--partners", "--pairs sampled")
    assert_one_line_error(done["no topology"], 2, "--topology", "nowhere.conf")
    assert_one_line_error(done["damaged topology"], 2, "line 2", "already under leaf1")
    assert_one_line_error(done["burn-in of no time"], 2, "--burnin", "more than 0")
    assert_one_line_error(done["burn-in of words"], 2, "--burnin", "a while")
    assert not any((tmp_path / name).exists() for name in ("p1", "p0", "seed", "all", "t0", "t1", "b0", "b1"))
    assert_one_line_error(done["one node"], 2, "runs on one node")
    assert_one_line_error(done["drain"], 2, "--drain", "not running under Slurm", "--dry-run")
    assert_one_line_error(done["dry run alone"], 2, "add --drain")
    assert_one_line_error(done["other class"], 2, "NVIDIA H100 80GB HBM3 x8", "another hardware class")
    assert_one_line_error(done["exclude over a run"], 2, "--exclude-out", "part of the run")


def test_sampled_pairs_on_four_nodes_record_their_plan_and_rows(tmp_path: Path) -> None:
    """Forced on a small fleet, the sampled plan gives each node its partners in that many rounds, from the seed
    run.json records; every row reaches pairs.csv, which run.json counts. (Their verdicts on real faults:
    test_fleet_netns.py.)"""
    out = tmp_path / "run"
    done = finish(start_nodes(4, ["fleet", *QUICK, "--numerics-steps", "0", "--pairs", "sampled", "--partners", "2",
                                  "--seed", "7", "--out", str(out)]))
    assert done[0].returncode in (0, 1), done[0].stderr[-2000:]  # 1: this busy host's noise proved a node slow
    run = read_run(out)
    cover = run["fleet"]["coverage"]
    assert (cover["mode"], cover["partners"], cover["rounds"], cover["pairs"], cover["possible"], cover["seed"]) == \
        ("sampled", 2, 2, 4, 6, 7)
    pairs = read_pairs(out)
    assert len(pairs) == run["pair_rows"] == 8 and "pairs" not in run
    assert "sampled: each node against 2 partners at least (seed 7) in 2 rounds" in done[0].stdout


@pytest.mark.parametrize("args, needle", [
    (["--partners", "5"], "--partners 5: the fleet has 3 nodes, so a node has 2 partners at most"),
    (["--topology", "TOPO"], "which this job does not have"),
])
def test_what_only_the_fleet_itself_can_refute_is_refused_on_every_rank_before_measuring(
        tmp_path: Path, args: list[str], needle: str) -> None:
    topo = tmp_path / "racks.txt"
    topo.write_text("".join(f"{node(i)} rack{i % 2}\n" for i in range(3)) + "ghost rack9\n")
    args = [str(topo) if a == "TOPO" else a for a in args]
    done = finish(start_nodes(3, ["fleet", *QUICK, "--numerics-steps", "0", *args, "--out", str(tmp_path / "run")]))
    for rank in done:
        assert rank.returncode == 2 and "Traceback" not in rank.stderr, rank.stderr[-2000:]
    assert_one_line_error(done[0], 2, needle)
    assert "node-local phase" not in done[0].stdout
