"""Every command joins the launchers people use: torchrun across "nodes", srun, sbatch, mpirun.

Each test drives the real launcher; the Slurm one is a real slurmctld + slurmd made for the test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from beds import free_port, slurm_cluster, which_or_skip
from conftest import assert_one_line_error, read_pairs, read_run

from clusterbench.inputs.hostlist import expand as expand_hostlist
from clusterbench.runtime.launchers import Joined, detect

FAST = ("-b", "8", "-e", "4K", "--iters", "3", "--warmup", "1")
CLI = (sys.executable, "-m", "clusterbench")


def torchrun_nodes(nodes: int, per_node: int, args: tuple[str, ...], env: dict | None = None, c10d: bool = True,
                   timeout: float = 180) -> list[subprocess.CompletedProcess]:
    """`nodes` torchrun agents on loopback, as on `nodes` machines, meeting through the c10d
    rendezvous (whichever agent comes first hosts its store) or the static one (node 0's agent does)."""
    port = free_port()
    rdzv = (["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "test"] if c10d else
            ["--master-addr", "127.0.0.1", "--master-port", str(port)])
    procs = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc-per-node", str(per_node),
         *rdzv, *([] if c10d else ["--node-rank", str(i)]), "-m", "clusterbench", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
    ) for i in range(nodes)]
    done = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return done


def test_two_torchrun_nodes_of_two_ranks_measure_every_scope(tmp_path: Path) -> None:
    out = tmp_path / "run"
    node0, node1 = torchrun_nodes(2, 2, ("comm", *FAST, "--scope", "all", "--out", str(out)))
    assert node0.returncode == 0 and node1.returncode == 0, (node0.stderr[-2000:], node1.stderr[-2000:])
    doc = read_run(out)
    assert doc["status"] == "complete" and doc["env"]["world_size"] == 4
    placed = [(p["rank"], p["local_rank"]) for p in doc["env"]["ranks"]]
    assert placed == [(0, 0), (1, 1), (2, 0), (3, 1)]
    nodes = [p["node"] for p in doc["env"]["ranks"]]
    assert nodes[0] == nodes[1] != nodes[2] == nodes[3]  # one host name, told apart by torchrun's node rank
    teams = {(r["scope"], r["team"], r["world_size"], r["nodes"]) for r in doc["comm"]}
    assert teams == {("global", "all", 4, 2), ("intra", nodes[0], 2, 1), ("intra", nodes[2], 2, 1),
                     ("inter", "rail 0", 2, 2), ("inter", "rail 1", 2, 2)}
    assert all(r["wrong"] == 0 for r in doc["comm"])
    assert "# intra: worst node for all_reduce" in node0.stdout and "# network: all_reduce" in node0.stdout
    assert node1.stdout.count("# all_reduce") == 0  # only global rank 0 prints


@pytest.mark.parametrize("fault", ["kill:3:3", "hang:3:3"])
def test_a_rank_that_dies_or_hangs_on_another_node_is_named_by_the_survivors(fault: str, tmp_path: Path) -> None:
    # Static rendezvous: the store lives with node 0's agent, so node 0 outlives node 1's failure
    # (under c10d the job ends with whichever node hosts the store, as torchrun designs it).
    # The timeout also bounds the join of 4 ranks importing torch on 2 cores: not too short.
    out = tmp_path / "run"
    runs = torchrun_nodes(2, 2, ("comm", *FAST, "--timeout", "15", "--out", str(out)),
                          env={"CLUSTERBENCH_TEST_FAULT": fault}, c10d=False, timeout=180)
    assert all(r.returncode != 0 for r in runs)
    lines = [line for r in runs for line in r.stderr.splitlines() if line.startswith("clusterbench:")]
    # Rank 2 shares node 1 with rank 3, and its agent may stop it before it says a word; a rank on
    # node 0 still blocked in the collective when the survivors look is silent too.
    assert lines and all(3 in silent_ranks(line) and 0 not in silent_ranks(line) for line in lines), lines
    assert all("during all_reduce 32 B" in line for line in lines), lines
    if fault.startswith("hang"):  # the stuck rank's heartbeat left its Flight Recorder when asked, across nodes
        assert any("Flight Recorder: rank 3" in line and "never entered all_reduce #" in line for line in lines), lines
    doc = read_run(out)
    assert doc["status"] == "failed" and 3 in silent_ranks(doc["error"]) and len(doc["comm"]) == 2


def silent_ranks(line: str) -> set[int]:
    """The ranks a survivor's line names as gone silent: "ranks 1, 3 (a, b) went silent" -> {1, 3}."""
    found = re.search(r"ranks? ([\d, -]+) \([^)]*\) went silent", line)
    ranks: set[int] = set()
    for span in found.group(1).split(",") if found else []:
        lo, _, hi = span.strip().partition("-")
        ranks.update(range(int(lo), int(hi or lo) + 1))
    return ranks


def test_pairwise_nodes_only_pairs_one_rank_per_node(tmp_path: Path) -> None:
    out = tmp_path / "run"
    node0, node1 = torchrun_nodes(2, 2, ("comm", "--pattern", "pairwise", "--nodes-only", "-e", "64K",
                                         "--out", str(out)))
    assert node0.returncode == 0 and node1.returncode == 0, (node0.stderr[-2000:], node1.stderr[-2000:])
    assert sorted((p["src"], p["dst"]) for p in read_pairs(out)) == [(0, 2), (2, 0)]
    assert "2 nodes (one rank each) on 2 node(s), 1 round of disjoint pairs" in node0.stdout


def test_a_rank_that_never_joins_is_named_within_the_timeout(tmp_path: Path) -> None:
    env = {"RANK": "0", "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    proc = subprocess.run([*CLI, "comm", "--timeout", "3", "--out", str(tmp_path / "run")], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=60, check=False)
    assert_one_line_error(proc, 1, "rendezvous incomplete after 3 s: 1 of 3 ranks joined", "ranks 1-2 never came")


def test_a_launcher_without_rank_0s_address_is_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    env |= {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    proc = subprocess.run([*CLI, "comm", "--out", str(tmp_path / "run")], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert_one_line_error(proc, 2, "launched by mpirun", "--master-addr")


def test_nproc_that_disagrees_with_the_launcher_is_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    proc = subprocess.run([*CLI, "comm", "--nproc", "4", "--out", str(tmp_path / "run")], capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    assert_one_line_error(proc, 2, "--nproc 4", "2 ranks")


def test_root_must_be_a_rank_of_every_team(tmp_path: Path) -> None:
    runs = torchrun_nodes(2, 2, ("comm", "--ops", "broadcast", "--scope", "inter", "--root", "2", *FAST,
                                 "--out", str(tmp_path / "run")))
    assert all(r.returncode != 0 for r in runs)  # torchrun reports its ranks' exit 2 as a failure
    assert "clusterbench: error: --root 2 is a rank within each inter team, and rail 0 has only 2 ranks" in \
        runs[0].stderr


def test_launchers_are_told_apart_by_their_variables() -> None:
    assert detect({}) is None
    assert detect({"RANK": "1", "WORLD_SIZE": "2"}).launcher == "environment"  # set by hand
    torchrun = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "GROUP_RANK": "1", "MASTER_ADDR": "n0",
                "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x", "TORCHELASTIC_USE_AGENT_STORE": "True"}
    assert detect(torchrun) == Joined("torchrun", 3, 4, 1, "1", "n0", 29500, agent_store=True, attempt="x/0")
    step = {"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
            "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "77", "SLURM_STEP_NODELIST": "gpu[07-08]"}
    joined = detect(step)
    assert (joined.launcher, joined.rank, joined.node, joined.master_addr) == ("srun", 2, "1", "gpu07")
    assert joined.master_port == detect({**step, "SLURM_PROCID": "0"}).master_port  # every rank derives the same
    assert detect({**step, "SLURM_STEP_ID": "1"}).master_port != joined.master_port  # the next step another
    batch = {k: v for k, v in step.items() if k != "SLURM_STEP_ID"}
    assert detect(batch) is None  # a batch script is not rank 0 of a step
    assert detect({**step, "SLURM_NTASKS": "1"}) is None  # `srun --pty bash`: the user runs it by hand
    assert detect({**batch, "SLURM_STEPID": "3"}).master_port is not None  # older Slurm's name for the step
    assert detect({**step, **torchrun}).launcher == "torchrun"  # torchrun inside an srun step
    assert detect({**batch, "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}).launcher == "mpirun"
    mpi = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_ess_base_jobid": "1356136449"}
    assert detect(mpi).master_addr == "127.0.0.1" and detect(mpi).master_port is not None


@pytest.mark.parametrize("text, hosts", [
    ("localhost", ["localhost"]),
    ("gpu[01-03,07],login1", ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]),
    ("a[8-10]", ["a8", "a9", "a10"]),
])
def test_slurm_host_lists_expand(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory):
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as bed:
        yield bed


def test_srun_two_tasks_join_as_two_ranks(slurm, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = slurm.srun(["-n", "2", *CLI, "comm", *FAST, "--out", str(out)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = read_run(out)
    assert doc["status"] == "complete" and doc["env"]["world_size"] == 2
    assert [p["local_rank"] for p in doc["env"]["ranks"]] == [0, 1]
    assert proc.stdout.count("# results:") == 1  # rank 0 speaks for the job


def test_a_rank_that_dies_under_srun_is_named_while_rank_0_hosts_the_store(slurm, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = slurm.srun(["-n", "3", "--overcommit", *CLI, "comm", *FAST, "--timeout", "30", "--out", str(out)],
                      env={"CLUSTERBENCH_TEST_FAULT": "kill:2:3"})
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.startswith("clusterbench:")]
    # A survivor that reports after the other's grace may be named beside rank 2: rank 2 is in every line.
    assert len(lines) == 2 and all(2 in silent_ranks(line) for line in lines), proc.stderr
    assert read_run(out)["status"] == "failed"


def test_sbatch_script_without_srun_runs_on_its_node_and_with_srun_joins(slurm, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\nset -e\n{' '.join(CLI)} comm --nproc 2 {' '.join(FAST)} --out {tmp_path}/alone\n"
                      f"srun -n 2 {' '.join(CLI)} comm {' '.join(FAST)} --out {tmp_path}/step\n")
    job = slurm.sbatch(script, "-n", "2")
    assert job.returncode == 0, job.output[-2000:]
    assert read_run(tmp_path / "alone")["env"]["world_size"] == 2  # spawned here: not "rank 0 of 2" waiting forever
    assert read_run(tmp_path / "step")["env"]["world_size"] == 2


def test_mpirun_two_ranks_join(tmp_path: Path) -> None:
    (mpirun,) = which_or_skip("mpirun")
    out = tmp_path / "run"
    proc = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "PATH", "-x",
                           "PYTHONPATH", *CLI, "comm", *FAST, "--out", str(out)],
                          capture_output=True, text=True, timeout=180, check=False,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = read_run(out)
    assert doc["status"] == "complete" and doc["env"]["world_size"] == 2
