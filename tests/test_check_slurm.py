"""`clusterbench check` as Slurm's own HealthCheckProgram, on a Slurm of two network-namespace nodes:
slurmd runs the check every INTERVAL seconds on each node, under the node's own host name. A node whose
processes a cgroup quota starves of CPU cannot finish its check within the budget, drains itself with that
reason, and resumes once the quota is lifted and it passes again; a node an admin drained for another
reason stays drained however well it checks.

The fault shows as the budget, not as a figure out of its band: on a host this small, shared with other
tests, how fast a healthy node multiplies matrices swings tenfold, and no fixed band tells that apart
from a starved node (test_check.py proves the band with one that no node can reach)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
from beds import SlurmNodesBed, cpu_quota, slurm_nodes, which_or_skip
from test_check import this_class, write_baseline

# A twentieth of a CPU: the interpreter and torch alone then take 40 s, while a healthy check takes
# under 3 s of CPU, so under a tight BUDGET even on a busy host.
QUOTA = 0.05
BUDGET = 15
# Seconds between the checks slurmctld asks for. Not 1: a node resumed is "not responding" until slurmctld
# pings it, and with a round of checks every second that ping never came (Slurm 22.05); nor does a node not
# responding get checks.
INTERVAL = 2


@dataclass
class Bed:
    slurm: SlurmNodesBed
    logs: Path  # each node's check lines, <node>.log

    def log(self, node: str) -> str:
        path = self.logs / f"{node}.log"
        return path.read_text() if path.exists() else ""


def until(ready: Callable[[], object], what: str, timeout: float = 60) -> object:
    deadline = time.monotonic() + timeout
    while not (found := ready()):
        assert time.monotonic() < deadline, f"not {what} after {timeout:.0f} s"
        time.sleep(0.2)
    return found


@contextmanager
def starving(slurm: SlurmNodesBed, node: int, fraction: float) -> Iterator[None]:
    """Every process node `node` runs while the block lasts held to `fraction` of one CPU, but its slurmd: a
    slurmd that cannot answer is marked not responding, and Slurm runs no health check on such a node."""
    slurmd = int((slurm.folder / f"slurmd-{slurm.names[node]}.pid").read_text())
    network = os.stat(f"/run/netns/{slurm.netns.names[node]}").st_ino
    held, stop = {slurmd}, threading.Event()

    def hold(starve: Callable[[int], None]) -> None:
        while not stop.is_set():
            for entry in Path("/proc").iterdir():
                with suppress(ValueError, OSError):  # not a process, or gone meanwhile
                    if int(entry.name) not in held and (entry / "ns" / "net").stat().st_ino == network:
                        starve(int(entry.name))
                        held.add(int(entry.name))
            stop.wait(0.02)  # a check takes seconds of CPU to start: it is caught long before it measures

    with cpu_quota(fraction) as starve:
        holder = threading.Thread(target=hold, args=(starve,), daemon=True)
        holder.start()
        try:
            yield
        finally:
            stop.set()
            holder.join()


def running(marker: str) -> list[int]:
    """The processes whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        with suppress(ValueError, OSError):  # not a process, or gone meanwhile
            if marker.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return found


def reason_of(slurm: SlurmNodesBed, node: str) -> str:
    """The node's drain reason, without the "[root@time]" Slurm adds."""
    shown = slurm.scontrol("show", "node", node, "-o").stdout
    return shown.partition(" Reason=")[2].strip().rpartition(" [")[0]


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """Two nodes for the module, each checking itself every INTERVAL seconds; every test leaves them idle."""
    (flock,) = which_or_skip("flock")
    folder = tmp_path_factory.mktemp("slurm")
    # A band every working node of this class clears, however busy the host: the check reads a fleet's
    # bands as a site would deploy it, and judges by them.
    baseline = write_baseline(folder / "baseline", this_class(), {"matmul_tflops": 1e-6})
    logs = folder / "checks"
    logs.mkdir()
    with slurm_nodes(folder, 2) as slurm:
        # slurmd runs the program with nothing in its environment but SLURMD_NODENAME, and starts the next
        # one every HealthCheckInterval whether the last has ended or not: flock keeps one at a time. One
        # thread each: the two nodes share this host's cores.
        env = " ".join(f"{key}={shlex.quote(value)}" for key, value in slurm.env.items())
        program = folder / "health-check.sh"
        program.write_text(
            f"#!/bin/sh\n[ -e {logs}/stop ] && exit 0\nexport {env} OMP_NUM_THREADS=1\n"
            f'exec {flock} -n -E 0 {logs}/"$SLURMD_NODENAME".lock {sys.executable} -m clusterbench check '
            f"--drain-on-fail --resume-on-pass --baseline {baseline} --numerics-steps 0 --budget {BUDGET} --store off "
            f'>>{logs}/"$SLURMD_NODENAME".log 2>&1\n')
        program.chmod(0o755)
        with slurm.conf.open("a") as conf:
            conf.write(f"HealthCheckProgram={program}\nHealthCheckInterval={INTERVAL}\nHealthCheckNodeState=ANY\n")
        assert slurm.scontrol("reconfigure").returncode == 0
        made = Bed(slurm, logs)
        for node in slurm.names:
            until(lambda node=node: "healthy" in made.log(node), f"{node} checked healthy", timeout=60)
        yield made
        # No more checks, and none under way: slurmd, stopping, would wait for it.
        (logs / "stop").touch()
        for pid in running(str(baseline)):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_starved_node_drains_itself_and_resumes_once_it_passes_again(bed: Bed) -> None:
    slurm, (healthy, starved) = bed.slurm, bed.slurm.names
    with starving(slurm, 1, QUOTA):
        until(lambda: slurm.node_state(starved) == "drained", f"{starved} drained")
        reason = reason_of(slurm, starved)
    assert reason.startswith(f"clusterbench check: did not finish within --budget {BUDGET} s ("), reason
    # Out of the quota, its next check passes and undoes its own drain.
    until(lambda: slurm.node_state(starved) == "idle", f"{starved} resumed")
    assert "resumed: a check had drained it" in bed.log(starved), bed.log(starved)[-2000:]
    assert slurm.node_state(healthy) == "idle"


def test_a_node_drained_for_another_reason_is_neither_resumed_nor_taken_over(bed: Bed) -> None:
    slurm, node = bed.slurm, bed.slurm.names[0]
    seen = len(bed.log(node))
    assert slurm.scontrol("update", f"nodename={node}", "state=drain", "reason=new DIMMs").returncode == 0
    try:
        # A failing check would replace the admin's reason with its own, and a later pass would resume the
        # node. Run by hand in the node, under its host name, which names the node where Slurm does not.
        env = {key: value for key, value in {**slurm.host_env, **slurm.env}.items() if key != "SLURMD_NODENAME"}
        failing = subprocess.Popen(
            slurm.netns.enter(0, [sys.executable, "-m", "clusterbench", "check", "--gpus", "1000", "--drain-on-fail",
                                  "--store", "off"], hostname=node),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        until(lambda: "stays drained" in bed.log(node)[seen:], f"{node} checked while drained")
        line = next(line for line in bed.log(node)[seen:].splitlines() if "stays drained" in line)
        assert line.startswith(f"clusterbench check: healthy: {node} (") and ", 4 checks, " in line, line
        out, err = failing.communicate(timeout=60)
        assert failing.returncode == 1 and out == "", (out, err)
        assert err.startswith(f"clusterbench check: {node}: torch sees "), err
        assert err.strip().endswith(" were expected; left drained as it was (new DIMMs)"), err
        assert slurm.node_state(node) == "drained" and reason_of(slurm, node) == "new DIMMs"
    finally:
        slurm.scontrol("update", f"nodename={node}", "state=resume")
