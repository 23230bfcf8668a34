"""`clusterbench fleet` with sampled pairs and a topology, across six network-namespace nodes in three
racks of two, the third rack's links across the "spine" held to 200 Mbit/s by `tc` and its link inside
left alone: under torchrun's variables with a plain `NODE SWITCH` topology file, and under a real multi-node
Slurm reading a topology.conf. The rack's two nodes go, named behind their switch, and nobody else does
(docs/methodology.md §16)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from beds import NetnsBed, netns_cluster, slurm_nodes
from conftest import finish, read_pairs, read_run, start_nodes

from clusterbench.inputs import hostlist

PORT = 29500  # inside namespaces the test made for itself: nothing else listens there
NODES = 6
RACKS = ["rack-a", "rack-a", "rack-b", "rack-b", "rack-c", "rack-c"]
SLOW_RACK = [4, 5]
# Four of the five partners: with three, a rack-c node has two pairs across, and where a partner busy with this
# host's load is taken for a suspect first and explains one of them, the other alone proves nothing.
SAMPLED = ["--pairs", "sampled", "--partners", "4", "--seed", "5", "--pair-bytes", "1M", "--pair-iters", "3",
           "--peak-seconds", "0.2", "--numerics-steps", "0", "--iface", "eth0", "--timeout", "60"]


def slow_rack(bed: NetnsBed) -> None:
    for node in SLOW_RACK:
        bed.cap_across(node, "200mbit", inside=[n for n in SLOW_RACK if n != node])


def judged(out: Path, names: list[str]) -> dict:
    run = read_run(out)
    fleet = run["fleet"]
    cover = fleet["coverage"]
    assert (cover["mode"], cover["inside"], cover["seed"]) == ("sampled", 1, 5), cover
    # Pairs across that a round inside a rack already holds are not drawn again: some node may meet one fewer.
    assert cover["partners"] in (3, 4) and cover["pairs"] in range(11, 13), cover
    assert len(read_pairs(out)) == run["pair_rows"] == 2 * cover["pairs"]
    assert fleet["racks"] == dict(zip(names, RACKS))
    rows = {row["node"]: row for row in fleet["nodes"]}
    gone = [names[i] for i in SLOW_RACK]
    assert [n for n, r in rows.items() if r["verdict"] == "EXCLUDE"] == gone, rows
    assert all(rows[n]["reasons"][0] == "behind rack-c, a fault its nodes share (see the switch)" for n in gone), rows
    [switch] = fleet["bad_switches"]
    # Inside, normal, or (where this busy host slowed the rack's own pair too) still far faster than across.
    assert switch.startswith("rack-c: 2 of its 2 nodes send at") and "slow too" not in switch, switch
    return fleet


def test_sampled_pairs_and_a_topology_file_name_the_slowed_rack_under_torchrun(tmp_path: Path) -> None:
    topology = tmp_path / "racks.txt"
    topology.write_text("".join(f"node{i} {rack}\n" for i, rack in enumerate(RACKS)))
    out = tmp_path / "run"
    with netns_cluster(NODES) as bed:
        slow_rack(bed)
        procs = start_nodes(NODES, ["fleet", *SAMPLED, "--topology", str(topology), "--out", str(out)],
                            master=bed.addr(0), port=PORT, popen=bed.popen)
        rank0 = finish(procs)[0]
    assert rank0.returncode == 1, (rank0.stdout[-3000:], rank0.stderr[-2000:])
    judged(out, [f"node{i}" for i in range(NODES)])
    assert "bad switch (its nodes share a fault): rack-c: 2 of its 2 nodes" in rank0.stdout
    assert "1 of them inside the racks" in rank0.stdout and "--exclude=node[4-5]" in rank0.stdout


def test_slurm_reads_its_topology_conf_and_drains_the_rack_behind_the_slow_switch(tmp_path_factory) -> None:
    folder = tmp_path_factory.mktemp("slurm")
    out, listed = folder / "run", folder / "exclude.txt"
    with slurm_nodes(folder, NODES) as bed:
        conf = folder / "topology.conf"
        conf.write_text("".join(f"SwitchName={rack} Nodes={hostlist.compress(bed.names[2 * i:2 * i + 2])}\n"
                                for i, rack in enumerate(("rack-a", "rack-b", "rack-c")))
                        + "SwitchName=spine Switches=rack-[a-c]\n")
        slow_rack(bed.netns)
        job = subprocess.run(
            bed.netns.enter(0, ["srun", "-N", str(NODES), "-n", str(NODES), sys.executable, "-m", "clusterbench",
                                "fleet", *SAMPLED, "--topology", str(conf), "--out", str(out),
                                "--exclude-out", str(listed), "--drain"]),
            env={**bed.host_env, **bed.env}, capture_output=True, text=True, timeout=300, check=False)
        states = {name: bed.node_state(name) for name in bed.names}
    assert job.returncode == 1, (job.stdout[-3000:], job.stderr[-2000:])
    judged(out, bed.names)
    assert "bad switch (its nodes share a fault): rack-c: 2 of its 2 nodes" in job.stdout
    assert "1 of them inside the racks" in job.stdout
    gone = [bed.names[i] for i in SLOW_RACK]
    assert sorted(listed.read_text().split()) == gone
    assert all(states[n].startswith("drain") == (n in gone) for n in bed.names), states
