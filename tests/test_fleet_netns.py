"""`clusterbench fleet` across network-namespace nodes, each with its own host name and address, with
real faults: a link held to 200 Mbit/s by `tc tbf`, a node held to a tenth of a CPU by a cgroup
quota, a node killed mid-run, a link slow only for a while; and a real multi-node Slurm that drains
what the fleet excludes. Each test shows that exactly the faulty nodes go, each for its reason."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from beds import NetnsBed, cpu_quota, netns_cluster, slurm_nodes
from conftest import finish, read_pairs, read_run, start_nodes

PORT = 29500  # inside namespaces the test made for itself: nothing else listens there
FAST = ["--pair-bytes", "1M", "--pair-iters", "3", "--peak-seconds", "0.2", "--numerics-steps", "0",
        "--iface", "eth0", "--timeout", "60"]


def fleet_on(bed: NetnsBed, nodes: int, out: Path, *args: str) -> list[subprocess.Popen]:
    return start_nodes(nodes, ["fleet", *FAST, "--out", str(out), *args], master=bed.addr(0), port=PORT,
                       popen=bed.popen)


def when(ready: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, "the run never got there"
        time.sleep(0.02)


def read_until(proc: subprocess.Popen, text: str, timeout: float = 120) -> str:
    """Rank 0's output up to the first line holding `text` (the rest stays for finish())."""
    deadline, seen = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        assert line, f"rank 0 ended before saying {text!r}:\n{''.join(seen)}"
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"rank 0 never said {text!r}")


def verdicts(out: Path) -> dict[str, str]:
    return {row["node"]: row["verdict"] for row in read_run(out)["fleet"]["nodes"]}


def pids_in(bed: NetnsBed, node: int) -> list[int]:
    listed = subprocess.run([bed.ip, "netns", "pids", bed.names[node]], capture_output=True, text=True, check=True)
    return [int(pid) for pid in listed.stdout.split()]


@pytest.fixture(scope="module")
def bed() -> Iterator[NetnsBed]:
    """Four nodes for the module: every test leaves them as it found them (no rate cap, no process left)."""
    with netns_cluster(4) as made:
        yield made


def test_a_healthy_fleet_excludes_nobody_twice_in_a_row(bed: NetnsBed, tmp_path: Path) -> None:
    """No false exclusion, run after run. A pair slowed by this shared host's other work may be reported
    flaky, and a node's figure may leave the band: neither excludes (the issue's target is exclusions)."""
    for attempt in range(2):
        out = tmp_path / f"run{attempt}"
        rank0 = finish(fleet_on(bed, 4, out))[0]
        excluded = (read_run(out).get("fleet") or {}).get("excluded")  # with the reasons: a failure's first words
        assert rank0.returncode == 0 and not excluded, (attempt, excluded, rank0.stderr[-1000:], rank0.stdout[-2000:])
        assert "EXCLUDE" not in verdicts(out).values(), read_run(out)["fleet"]["nodes"]
        assert "no node to exclude of 4" in rank0.stdout


def test_a_link_slow_for_a_while_is_flaky_reported_and_nobody_is_excluded(bed: NetnsBed, tmp_path: Path) -> None:
    out = tmp_path / "run"
    # node1 -> node2 alone, so that a cap lifted late on this shared host slows no pair of the later rounds
    # (node1 meets node3, then node0). The retests come under a second after round 1: the lift must not wait
    # on a process starting.
    bed.set_rate(1, "200mbit", to=2)
    try:
        with bed.link_lifter(1) as lift:
            procs = fleet_on(bed, 4, out)
            read_until(procs[0], "# round 1/")  # the first round, node1 with node2, is over: the link recovers
            lift()
    finally:
        bed.set_rate(1, None)
    rank0 = finish(procs)[0]
    assert rank0.returncode == 0, (rank0.stdout[-3000:], rank0.stderr[-2000:])
    fleet = read_run(out)["fleet"]
    assert not fleet["excluded"] and set(verdicts(out).values()) <= {"PASS", "SUSPECT"}
    # node1's link is named: flaky, or node1 a suspect when this shared host's other work also slowed one
    # of its retests (one slow partner proves nothing). A pair slowed for a moment by that work may be too.
    links = [text.split(":")[0] for text in fleet["flaky"]]
    suspects = [r["node"] for r in fleet["nodes"] if r["verdict"] == "SUSPECT"]
    assert any("node1" in link.split(" -> ") for link in links) or "node1" in suspects, (fleet["flaky"], suspects)
    assert any((t["src_node"], t["dst_node"]) == ("node1", "node2") and not t["slow"] for t in fleet["retests"])
    said = "flaky link (reported, nobody excluded): node1 -> " in rank0.stdout
    assert said or re.search(r"SUSPECT +node1 ", rank0.stdout), rank0.stdout[-3000:]


def test_a_link_slow_through_its_retest_is_looked_at_again_and_keeps_the_faster_look(bed: NetnsBed,
                                                                                     tmp_path: Path) -> None:
    """A busy host's slow moment can outlast a retest's messages: a pair still slow is looked at again a second
    later, each way keeping the faster look. The link is held slow through round 1 and the first look."""
    out = tmp_path / "run"
    bed.set_rate(1, "200mbit", to=2)
    try:
        with bed.link_lifter(1) as lift:
            procs = fleet_on(bed, 4, out)
            said = read_until(procs[0], "slow on retest: looked at again")
            lift()
    finally:
        bed.set_rate(1, None)
    rank0 = finish(procs)[0]
    assert rank0.returncode == 0, (rank0.stdout[-3000:], rank0.stderr[-2000:])
    assert "the fastest of 10 messages each way" in said  # --pair-iters 3 here: a retest takes 10 at least
    fleet = read_run(out)["fleet"]
    assert not fleet["excluded"] and set(verdicts(out).values()) <= {"PASS", "SUSPECT"}
    [again] = [t for t in fleet["retests"] if (t["src_node"], t["dst_node"]) == ("node1", "node2")]
    # The first look ran under the cap (0.2 Gbit/s, as in round 1), so a figure far above it is the second look's.
    # Whether that figure clears the bar is this shared host's business: once in CI it did not (4.4 Gbps).
    assert again["first_gbps"] < 0.25 and again["gbps"] > 5 * 0.2, again


def test_a_node_killed_mid_run_is_named_and_excluded_with_what_was_measured_kept(bed: NetnsBed,
                                                                                 tmp_path: Path) -> None:
    out = tmp_path / "run"
    procs = fleet_on(bed, 4, out, "--timeout", "20")
    read_until(procs[0], "# round 1/")
    for pid in pids_in(bed, 3):
        subprocess.run(["kill", f"-{signal.SIGKILL.value}", str(pid)], check=False)
    started = time.monotonic()
    rank0 = finish(procs, timeout=120)[0]
    # Ranks blocked on a healthy peer that waits on the dead one learn of it only at the timeout.
    assert time.monotonic() - started < 20 + 15
    assert rank0.returncode == 1 and "Traceback" not in rank0.stderr, rank0.stderr[-2000:]
    run = read_run(out)
    assert run["status"] == "failed" and read_pairs(out)  # the first round's pairs are kept
    assert [lost["node"] for lost in run["lost"]] == ["node3"]
    rows = {row["node"]: row for row in run["fleet"]["nodes"]}
    assert rows["node3"]["verdict"] == "EXCLUDE"
    assert rows["node3"]["reasons"][0].startswith("did not finish the pairwise phase"), rows["node3"]
    assert [n for n, r in rows.items() if r["verdict"] == "EXCLUDE"] == ["node3"]
    assert "--exclude=node3" in rank0.stdout


def test_slurm_fleet_drains_exactly_the_slow_link_and_the_slow_node(tmp_path_factory) -> None:
    folder = tmp_path_factory.mktemp("slurm")
    out, listed = folder / "run", folder / "exclude.txt"
    with slurm_nodes(folder, 5, slow={2: "200mbit"}) as bed, cpu_quota(0.1) as slow_cpu:
        job = subprocess.Popen(
            bed.netns.enter(0, ["srun", "-N", "5", "-n", "5", sys.executable, "-m", "clusterbench", "fleet", *FAST,
                                "--out", str(out), "--exclude-out", str(listed), "--drain"]),
            env={**bed.host_env, **bed.env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        when(lambda: (out / "run.json").exists() and "fleet" in json.loads((out / "run.json").read_text()))
        for pid in pids_in(bed.netns, 4):
            slow_cpu(pid)
        stdout, stderr = job.communicate(timeout=240)
        states = {name: bed.node_state(name) for name in bed.names}
    assert job.returncode == 1, (stdout[-3000:], stderr[-2000:])
    fleet = read_run(out)["fleet"]
    rows = {row["node"]: row for row in fleet["nodes"]}
    slow_link, slow_node = bed.names[2], bed.names[4]
    assert [n for n, r in rows.items() if r["verdict"] == "EXCLUDE"] == [slow_link, slow_node], rows
    assert "sends to" in rows[slow_link]["reasons"][0] and "healthy partners" in rows[slow_link]["reasons"][0]
    # The quota lands once the fleet section is written: when the node-local phase is still running, its figures
    # fall out twice; when it is done, its links prove it. Either way it is excluded on proof.
    assert any("measured again alone" in r or "healthy partners" in r for r in rows[slow_node]["reasons"]), rows
    assert sorted(listed.read_text().split()) == [slow_link, slow_node]
    assert states[slow_link].startswith("drain") and states[slow_node].startswith("drain"), states
    assert all(not states[n].startswith("drain") for n in bed.names if n not in (slow_link, slow_node)), states


def test_global_all_reduce_short_of_healthy_pairs_is_traced_to_the_node_that_slows_it(bed: NetnsBed,
                                                                                       tmp_path: Path) -> None:
    """Every pair passes (the node is held to a twentieth of a CPU only once the rounds are over), yet the
    all_reduce across nodes crawls: halving the fleet, then pairing the last two beside a good node, names it."""
    out = tmp_path / "run"
    with cpu_quota(0.05) as slow_cpu:
        procs = fleet_on(bed, 4, out, "--global")
        read_until(procs[0], "# round 3/3 done")
        for pid in pids_in(bed, 3):
            slow_cpu(pid)
        rank0 = finish(procs)[0]
    assert rank0.returncode == 1, (rank0.stdout[-3000:], rank0.stderr[-2000:])
    fleet = read_run(out)["fleet"]
    assert fleet["isolated"] == ["node3"] and len(fleet["whole"]["nodes"]) == 4, fleet["search"]
    rows = {row["node"]: row for row in fleet["nodes"]}
    assert [n for n, r in rows.items() if r["verdict"] == "EXCLUDE"] == ["node3"], rows
    assert any("the search narrowed it to node3" in r for r in rows["node3"]["reasons"])
