"""Launches that cannot work end within the rendezvous timeout, in one line on every rank saying who and where.

Under a real multi-node Slurm whose node names resolve nowhere, `srun clusterbench comm` used to print nothing
for minutes: Gloo, finding no address for its host's name, fell back to loopback, and every rank dialled itself
for the collectives' whole 300 s timeout. Here the names still resolve nowhere: with rank 0's address given the
job runs, without it every rank says so at once, and a resolver whose server never answers is cut at the
deadline. Under torchrun a rank that never comes is named with the node it was meant for; ranks started with
different world sizes, a port another program squats on and a hand-set seat that contradicts srun are each
refused in one line, on a real store."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from beds import SlurmNodesBed, free_port, slurm_nodes
from conftest import finish
from test_launch_inputs import _launcher_free_env

from clusterbench.errors import RunFailed, UsageError
from clusterbench.runtime.launchers import detect
from clusterbench.runtime.rendezvous import Member, Rendezvous, check_address, port_holder

SLURM_RDZV_S = 5
# A process's start (Python, torch, clusterbench) on a loaded 2-core runner, on top of the rendezvous timeout.
START_S = 40


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmNodesBed]:
    with slurm_nodes(tmp_path_factory.mktemp("slurm"), 3, resolvable=False) as made:
        yield made


def _srun(bed: SlurmNodesBed, out: Path, env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess, float]:
    argv = ["srun", "-N", "3", "-n", "3", "-l", sys.executable, "-m", "clusterbench", "comm", "-e", "64", "--iters",
            "2", "--warmup", "1", "--rendezvous-timeout", str(SLURM_RDZV_S), "--out", str(out), *args]
    start = time.monotonic()
    proc = subprocess.run(bed.netns.enter(0, argv), env={**bed.host_env, **bed.env, **env}, capture_output=True,
                          text=True, timeout=SLURM_RDZV_S + START_S + 60, check=False)
    return proc, time.monotonic() - start


def test_a_slurm_whose_node_names_resolve_nowhere(bed: SlurmNodesBed, tmp_path: Path) -> None:
    proc, took = _srun(bed, tmp_path / "unnamed", {})
    lines = [line for line in proc.stderr.splitlines() if "clusterbench:" in line]
    assert proc.returncode != 0 and took < SLURM_RDZV_S + START_S, (took, proc.stderr)
    assert sorted(line.split(":")[0] for line in lines) == ["0", "1", "2"], proc.stderr  # every rank, once
    assert all(f"rank 0's address '{bed.names[0]}' does not resolve" in line for line in lines), lines
    assert "Traceback" not in proc.stderr

    # Rank 0's address given, no --iface: Gloo talks over the interface that reaches rank 0, not loopback.
    proc, took = _srun(bed, tmp_path / "addressed", {"MASTER_ADDR": bed.netns.addr(0), "MASTER_PORT": "29500"})
    assert proc.returncode == 0, (took, proc.stdout[-2000:], proc.stderr[-3000:])
    assert "3 ranks on 3 node(s)" in proc.stdout

    # A name server that takes the question and never answers: the resolver would wait its timeout times its
    # attempts for each address family; the check gives up at its deadline.
    silent = "import socket,time;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.bind(('0.0.0.0',53));time.sleep(60)"
    server = subprocess.Popen(bed.netns.argv(2, [sys.executable, "-c", silent]))
    resolv = Path("/etc/netns") / bed.netns.names[2] / "resolv.conf"
    resolv.write_text(f"nameserver {bed.netns.addr(2)}\noptions timeout:30 attempts:2\n")
    try:
        ask = ("import time;from clusterbench.runtime.rendezvous import check_address as c;t=time.monotonic()\n"
               "try: c('rank0.cluster.example', 1.5)\nexcept Exception as e: print(f'{time.monotonic()-t:.1f}', e)")
        asked = bed.netns.run(2, [sys.executable, "-c", ask], timeout=60)
    finally:
        server.kill()
        resolv.unlink()
    took_s, _, line = asked.stdout.strip().partition(" ")
    assert float(took_s) < 3 and "did not resolve within 1.5 s (no name server answered)" in line, asked


def test_under_torchrun_a_rank_that_never_comes_is_named_with_its_node(tmp_path: Path) -> None:
    """Two torchrun nodes meet (torchrun's own rendezvous), but node 1's clusterbench never joins ours."""
    port = str(free_port())

    def node(i: int, *command: str) -> subprocess.Popen:
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(i),
                "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", port, *command]
        return subprocess.Popen(argv, env=_launcher_free_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    start = time.monotonic()
    # Node 1's worker is a program that ends at once (a node whose clusterbench is broken, or another job's).
    rank0, rank1 = finish([node(0, "-m", "clusterbench", "comm", "-e", "64", "--rendezvous-timeout", "3", "--out",
                                str(tmp_path / "n0")), node(1, "--no-python", "false")], timeout=120)
    assert rank1.returncode != 0
    assert rank0.returncode != 0 and time.monotonic() - start < 3 + START_S, rank0.stderr[-2000:]
    assert ("rendezvous incomplete after 3 s: 1 of 2 ranks joined" in rank0.stderr
            and "rank 1 (meant for the node of GROUP_RANK=1) never came" in rank0.stderr), rank0.stderr[-2000:]


def _store(world_size: int, timeout_s: float = 5) -> Rendezvous:
    return Rendezvous.open("127.0.0.1", 0, world_size, timeout_s, server=True)


def _joining(rdzv: Rendezvous, me: Member, timeout_s: float, ended: dict[int, str],
             planned: Callable[[int], str | None] = lambda rank: None) -> threading.Thread:
    """`me` joins `rdzv` from a client of its own, in a thread; how it ended lands in `ended`."""
    peer = Rendezvous.open("127.0.0.1", rdzv.port, rdzv.world_size, timeout_s, server=False)

    def join() -> None:
        try:
            peer.join(me, timeout_s, planned)
            ended[me.rank] = "joined"
        except RunFailed as e:
            ended[me.rank] = str(e)

    thread = threading.Thread(target=join)
    thread.start()
    return thread


def test_ranks_started_with_different_world_sizes_all_say_so_at_once() -> None:
    rdzv = _store(3)
    ended: dict[int, str] = {}
    first = _joining(rdzv, Member(0, "a", 0), 20, ended)
    time.sleep(0.3)
    late = Rendezvous.open("127.0.0.1", rdzv.port, 2, 20, server=False)  # this rank was told 2
    start = time.monotonic()
    with pytest.raises(RunFailed, match=r"rank 0 \(a\) was started with 3 ranks, rank 1 \(b\) with 2"):
        late.join(Member(1, "b", 0), 20)
    first.join()
    assert time.monotonic() - start < 2 and "ranks disagree on the world size" in ended[0], ended


def test_a_rank_that_never_comes_is_named_with_the_slurm_node_meant_for_it() -> None:
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "9", "MASTER_ADDR": "x",
           "SLURM_STEP_NODELIST": "gpu[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_LOCALID": "0"}
    planned = detect(env)
    assert [planned.planned_node(r) for r in range(5)] == ["gpu1", "gpu1", "gpu2", "gpu2", None]
    assert detect({**env, "SLURM_DISTRIBUTION": "cyclic"}).planned_node(0) is None  # srun does not say
    rdzv, ended = _store(4), {}
    hosts = {0: "gpu1", 1: "gpu1", 3: "gpu2"}  # rank 2 never comes
    for thread in [_joining(rdzv, Member(r, host, 0), 1, ended, planned.planned_node) for r, host in hosts.items()]:
        thread.join()
    assert set(ended) == set(hosts)
    for line in ended.values():  # every rank that came says it
        assert line.endswith("3 of 4 ranks joined (gpu1: ranks 0-1; gpu2: rank 3); rank 2 (meant for gpu2) never "
                             "came"), line


def test_a_port_squatted_by_another_program_is_named_on_both_sides() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        assert port_holder(port).startswith(f"pid {os.getpid()} (")
        with pytest.raises(UsageError, match=rf"port {port}: the port is in use on .* \(held by pid {os.getpid()} "):
            Rendezvous.open("127.0.0.1", port, 2, 1, server=True)
        start = time.monotonic()
        with pytest.raises(RunFailed, match=f"something at 127.0.0.1:{port} took the connection but never answered"):
            Rendezvous.open("127.0.0.1", port, 2, 1, server=False)
        assert time.monotonic() - start < 4


def test_a_hand_set_seat_that_contradicts_srun_is_refused() -> None:
    step = {"SLURM_STEP_ID": "0", "SLURM_JOB_ID": "9", "SLURM_PROCID": "2", "SLURM_NTASKS": "3", "MASTER_ADDR": "x",
            "MASTER_PORT": "29400"}
    with pytest.raises(UsageError, match=r"WORLD_SIZE=4 but srun started 3 tasks \(SLURM_NTASKS=3\)"):
        detect({**step, "RANK": "2", "WORLD_SIZE": "4"})
    with pytest.raises(UsageError, match=r"RANK=0 but this is srun's task 2 \(SLURM_PROCID=2\)"):
        detect({**step, "RANK": "0", "WORLD_SIZE": "3"})
    assert detect({**step, "RANK": "2", "WORLD_SIZE": "3"}).rank == 2
    # A spawner of two ranks per task, as torchrun would be, and torchrun itself: their worlds are their own.
    assert detect({**step, "RANK": "5", "WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "2"}).world_size == 6
    assert detect({**step, "RANK": "0", "WORLD_SIZE": "8", "TORCHELASTIC_RUN_ID": "r"}).world_size == 8


def test_an_address_that_does_not_resolve_is_refused_within_the_deadline() -> None:
    with pytest.raises(UsageError, match="'no.such.host.invalid' does not resolve"):
        check_address("no.such.host.invalid", 5)
