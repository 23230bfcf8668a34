"""Launcher environments and launch options that cannot work: one line, exit 2, at once.

A seat outside the world, a port out of range or an address that does not resolve used to wait
out the whole rendezvous timeout (300 s) with no line; an interface this host lacks ended as a
measurement failure; an empty item of a list was taken for nothing. Each case drives the real CLI
with a subprocess timeout far below the rendezvous timeout, so a hang fails the test rather than
stalling it, and, where the refusal comes before the run folder is claimed, that none was made.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from conftest import assert_one_line_error, read_run, run_cli

from clusterbench.errors import UsageError
from clusterbench.hw.network import check_interface
from clusterbench.runtime.launchers import LAUNCHERS

BOUND_S = 60  # far below the 300 s rendezvous timeout, far above a refusal's torch import on a busy machine
FAST = ("-b", "8", "-e", "64", "--iters", "2", "--warmup", "1")
HERE = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400"}  # nothing listens: a refusal never gets that far


def _launcher_free_env() -> dict[str, str]:
    """This process's environment without any launcher's variables: the test runner may itself run
    under torchrun, srun or mpirun."""
    names = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"}
    for entry in LAUNCHERS:
        names |= {entry.rank, entry.size, entry.local_rank, entry.local_size, entry.node}
    return {k: v for k, v in os.environ.items() if k not in names and not k.startswith("SLURM_")}


def _refused(tmp_path: Path, env: dict[str, str], *args: str, command: str = "comm") -> str:
    """Run a rank command under `env` and hold it to the promise; returns its one line."""
    out = tmp_path / "run"
    full = {**_launcher_free_env(), **env}
    proc = run_cli(command, *args, "--out", str(out), env=full, timeout=BOUND_S)
    line = assert_one_line_error(proc, 2)
    assert not out.exists(), "refused before the run folder was claimed"
    return line


# A step of several tasks: what makes Slurm's variables a launcher's (a batch script is not one).
SLURM_STEP = {"SLURM_STEP_ID": "0", "SLURM_JOB_ID": "77"}
# No MASTER_ADDR: rank 0's host is the first of the step's host list.
SLURM_NODES = {**SLURM_STEP, "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "MASTER_ADDR": ""}


@pytest.mark.parametrize("entry", LAUNCHERS, ids=[f"{e.name}:{e.rank}" for e in LAUNCHERS])
def test_every_launcher_refuses_a_seat_that_cannot_exist(entry, tmp_path: Path) -> None:
    base = {**HERE, **SLURM_STEP}
    line = _refused(tmp_path, {**base, entry.rank: "2", entry.size: "2"})
    assert f"{entry.rank}=2 with {entry.size}=2: a rank is 0 to 1" in line
    line = _refused(tmp_path, {**base, entry.rank: "0", entry.size: "-3"})
    assert f"{entry.size}=-3" in line and "--root" not in line  # never a 0-rank job, never an option not given
    line = _refused(tmp_path, {**base, entry.rank: "1", entry.size: "4", entry.local_rank: "4"})
    assert f"{entry.local_rank}=4 with {entry.size}=4: a local rank is 0 to 3" in line


ENVIRONMENTS = {
    "rank negative": ({"RANK": "-1", "WORLD_SIZE": "2"}, "RANK=-1 with WORLD_SIZE=2"),
    "rank past the world": ({"RANK": "5", "WORLD_SIZE": "2"}, "RANK=5 with WORLD_SIZE=2: a rank is 0 to 1"),
    "rank a word": ({"RANK": "one", "WORLD_SIZE": "2"}, "RANK='one', which is not an integer"),
    "a number with an underscore": ({"RANK": "0", "WORLD_SIZE": "1_0"}, "WORLD_SIZE='1_0'"),
    "world of no ranks": ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0: a world size is 1 to"),
    "world of digits beyond any job": ({"RANK": "0", "WORLD_SIZE": "9" * 5000}, "WORLD_SIZE=99999"),
    "local rank past its host": ({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
                                 "LOCAL_RANK=2 with LOCAL_WORLD_SIZE=2"),
    "host of more ranks than the world": ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "3"},
                                          "LOCAL_WORLD_SIZE=3 with WORLD_SIZE=2"),
    "port too high": ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "99999"}, "MASTER_PORT=99999: a port is 1 to 65535"),
    "port zero": ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "0"}, "MASTER_PORT=0"),
    "port a word": ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "abc"}, "MASTER_PORT='abc'"),
    "slurm host list garbled": ({**SLURM_NODES, "SLURM_STEP_NODELIST": "gpu[a-b]"},
                                "SLURM_STEP_NODELIST: malformed host list 'gpu[a-b]'"),
    "slurm host list of a billion hosts": ({**SLURM_NODES, "SLURM_JOB_NODELIST": "gpu[0-999999999]"},
                                           "SLURM_JOB_NODELIST: host list 'gpu[0-999999999]' names 1000000000 hosts"),
    "slurm first host unknown": ({**SLURM_NODES, "SLURM_STEP_NODELIST": "nosuchhost[1-2]"},
                                 "'nosuchhost1' does not resolve"),
    "mpirun local rank past its host": ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
                                         "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"},
                                        "OMPI_COMM_WORLD_LOCAL_RANK=1 with OMPI_COMM_WORLD_LOCAL_SIZE=1"),
}


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_a_launcher_environment_that_cannot_work_is_refused_before_the_rendezvous(name: str, tmp_path: Path) -> None:
    env, needle = ENVIRONMENTS[name]
    line = _refused(tmp_path, {**HERE, **env})
    assert needle in line and len(line) < 300, line


@pytest.mark.parametrize("rank", ["0", "1"])  # rank 0 hosts the store, rank 1 reaches it: neither may wait
def test_an_address_that_does_not_resolve_is_one_line_at_once(rank: str, tmp_path: Path) -> None:
    # Not _refused: rank 0 claims its run folder before it learns where to meet (harness.run_ranks).
    env = {**_launcher_free_env(), "RANK": rank, "WORLD_SIZE": "2", "MASTER_ADDR": "no.such.host.invalid",
           "MASTER_PORT": "29400"}
    proc = run_cli("comm", "--out", str(tmp_path / "run"), env=env, timeout=BOUND_S)
    assert_one_line_error(proc, 2, "'no.such.host.invalid' does not resolve", "MASTER_ADDR")


def test_a_port_another_process_holds_is_one_line_at_once(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        env = {**_launcher_free_env(), "RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        proc = run_cli("comm", "--out", str(tmp_path / "run"), env=env, timeout=BOUND_S)
    assert_one_line_error(proc, 2, f"cannot open the rendezvous on port {port}")


@pytest.mark.parametrize("command", ["run", "train"])
def test_every_rank_command_checks_its_launcher(command: str, tmp_path: Path) -> None:
    line = _refused(tmp_path, {**HERE, "RANK": "2", "WORLD_SIZE": "2"}, command=command)
    assert "RANK=2 with WORLD_SIZE=2" in line


OPTIONS = {
    "an empty algorithm": (["--algo", "native,,ring"], "an empty algorithm in 'native,,ring'"),
    "a trailing comma": (["--algo", "ring,"], "an empty algorithm"),
    "an empty op": (["--ops", "all_reduce,,broadcast"], "an empty op"),
    "an empty NCCL algorithm": (["--nccl-algo", "ring,,tree"], "an empty NCCL algorithm"),
    "an interface this host lacks": (["--iface", "nosuchif0"], "--iface 'nosuchif0': no such network interface"),
    "inter-node scope on one rank": (["--scope", "inter", "--nproc", "1"], "--scope inter needs at least two nodes"),
    "intra-node scope on one rank": (["--scope", "intra", "--nproc", "1"], "--scope intra needs a node with"),
    "a timeout under a second": (["--timeout", "0.001"], "--timeout: must be a finite number at least 1"),
    "a timeout past torch's clocks": (["--timeout", "1e15"], "at most 604800"),
    "a step factor of billions of sizes": (["-f", "1.0000001"], "--step-factor 1.0000001 takes"),
    "a size past 64 bits": (["-e", "9" * 400 + "G"], "--max-bytes: must be at most"),
    "more ranks than any job": (["--nproc", str(2**40)], "--nproc: must be at most 1048576"),
    "a fraction above one": (["--pattern", "pairwise", "--flag-below", "1.5"], "--flag-below"),
}


@pytest.mark.parametrize("name", OPTIONS)
def test_a_launch_option_that_cannot_work_is_refused_up_front(name: str, tmp_path: Path) -> None:
    args, needle = OPTIONS[name]
    line = _refused(tmp_path, {}, *args)
    assert needle in line and len(line) < 300, line


def test_the_interfaces_this_host_has_are_named(tmp_path: Path) -> None:
    assert "it has lo" in _refused(tmp_path, {}, "--iface", "nosuchif0")


def test_a_seed_torch_cannot_take_is_refused(tmp_path: Path) -> None:
    assert "--seed: must be at most" in _refused(tmp_path, {}, "--seed", str(2**64), command="train")


def test_every_scope_on_one_node_measures_what_it_can_and_says_what_it_skipped(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("comm", "--scope", "all", "--nproc", "1", *FAST, "--out", str(out), env=_launcher_free_env(),
                   timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "# inter: skipped: the job runs on one node" in proc.stdout
    assert {r["scope"] for r in read_run(out)["comm"]} == {"global"}


@pytest.mark.parametrize("spec", ["lo", "l", "=lo", "^docker", "lo,l"])
def test_an_interface_is_read_as_nccl_reads_it(spec: str) -> None:
    check_interface(spec)  # a name, a prefix, an exact name, an exclusion, a list: what NCCL_SOCKET_IFNAME takes


@pytest.mark.parametrize("spec", ["nosuchif0", "=l", "lo,,l", ""])
def test_an_interface_that_names_nothing_here_is_refused(spec: str) -> None:
    with pytest.raises(UsageError, match="no such network interface"):
        check_interface(spec)
