"""`clusterbench fleet` with sampled pairs and a topology, across six network-namespace nodes in three
racks of two, the third rack's links across the "spine" held to 200 Mbit/s by `tc` and its link inside
left alone, under a real multi-node Slurm reading a topology.conf. The rack's two nodes go, named behind
their switch, and nobody else does (docs/methodology.md §16). The plain `NODE SWITCH` form of a topology
file is read by the same parser (tests/test_fleet_scale.py); torchrun's launch, by tests/test_fleet_netns.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from beds import NetnsBed, slurm_nodes
from conftest import read_pairs, read_run

from clusterbench import hostlist

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
