"""Which launcher started this process, and what it says about our place in the job.

Each launcher is one entry of LAUNCHERS: the variables that carry the rank, the world size,
the local rank, the ranks on this host and the node, and how rank 0's address and a port follow
from them. torchrun and a hand-set RANK/WORLD_SIZE come first because they also run inside srun
and mpirun allocations; a Slurm batch script (SLURM_PROCID=0 but no step) and a one-task step
(`srun --pty bash`) are not launchers: there the user runs clusterbench by hand.

What a launcher says is checked here, for every launcher alike, before any rank looks for
another: a seat that cannot exist (a rank outside the world size, a world of no ranks) or a
port that cannot be one would otherwise wait out the whole timeout for peers that never come.
So is a seat set by hand (RANK/WORLD_SIZE without torchrun) that contradicts the srun step or
mpirun job around it: every task exporting RANK=0, or a WORLD_SIZE from another job, would meet
nobody. Where the launcher says which node runs which rank (srun's host list and tasks per
node, torchrun's ranks per node), `planned` keeps it, so a rank that never comes is named with
the node that should have run it.
"""

from __future__ import annotations

import os
import re
import sys
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from clusterbench.argtypes import clipped
from clusterbench.errors import UsageError
from clusterbench.inputs import hostlist

# Ports derived from a job id fall in this range: above the well-known and registered ports
# most services take, below Linux's default ephemeral range (32768+), so no client port holds one.
PORT_BASE, PORT_SPAN = 15000, 15000
# The most ranks a job may have: far above the largest jobs run, far below what makes the store's
# bookkeeping (a key per rank) take longer than any timeout. A larger number is a damaged variable.
MAX_WORLD_SIZE = 1 << 20
_INTEGER = re.compile(r"[+-]?[0-9]+")
_NODELISTS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")  # a step's own list first
_TASKS_PER_NODE = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
_TASKS_RUN = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?")


@dataclass(frozen=True)
class Joined:
    """This process is one rank of a job a launcher started."""

    launcher: str
    rank: int
    world_size: int
    local_rank: int
    node: str | None  # the launcher's node index, when it gives one
    master_addr: str | None
    master_port: int | None
    agent_store: bool = False  # torchrun's agent already hosts the store: no rank is its server
    attempt: str = ""  # torchrun's run id and restart count: a restarted job must not find the last one's keys
    planned: tuple[tuple[str, int], ...] = ()  # (node, its ranks) in rank order, where the launcher says

    @property
    def hosts_store(self) -> bool:
        return self.rank == 0 and not self.agent_store

    def planned_node(self, rank: int) -> str | None:
        """The node the launcher meant `rank` for, or None where it does not say."""
        first = 0
        for node, count in self.planned:
            if rank < first + count:
                return node
            first += count
        return None


@dataclass(frozen=True)
class Launcher:
    name: str
    rank: str
    size: str
    local_rank: str
    local_size: str | None  # the ranks on this host, when the launcher tells
    node: str | None
    port: Callable[[Mapping[str, str]], int | None]  # a port every rank derives alike
    master: Callable[[Mapping[str, str]], str | None] = lambda env: None  # rank 0's host, when the launcher tells
    agent_store: Callable[[Mapping[str, str]], bool] = lambda env: False


def _derived_port(*parts: str | None) -> int | None:
    """A port every rank of one job computes alike from the launcher's job id (and step)."""
    if any(not p for p in parts):
        return None
    # A numeric id as it is; another (a PMIx namespace "prterun-host-123@1", or a damaged one) through
    # a stable hash.
    numbers = [int(p) if re.fullmatch(r"[0-9]{1,18}", p) else zlib.crc32(os.fsencode(p)) for p in parts]
    return PORT_BASE + sum(n * 7919**i for i, n in enumerate(numbers)) % PORT_SPAN


def _slurm_hosts(env: Mapping[str, str]) -> list[str] | None:
    """srun's host list, expanded; None where it sets none. srun never writes a malformed list, nor one of
    more hosts than Slurm takes: such a variable is damaged, and refused in one line naming it."""
    key = next((k for k in _NODELISTS if k in env), None)
    if key is None:
        return None
    try:
        return hostlist.expand(env[key])
    except ValueError as e:
        raise UsageError(f"srun set {key}: {e}") from None


def _first_slurm_host(env: Mapping[str, str]) -> str | None:
    hosts = _slurm_hosts(env)
    return hosts[0] if hosts else None


LAUNCHERS = (
    Launcher("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
             port=lambda env: None,
             agent_store=lambda env: env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"),
    Launcher("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
             "OMPI_COMM_WORLD_LOCAL_SIZE", None,
             port=lambda env: _derived_port(env.get("OMPI_MCA_ess_base_jobid") or env.get("PMIX_NAMESPACE"))),
    Launcher("mpirun", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", None, port=lambda env: None),
    Launcher("srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", None, "SLURM_NODEID",
             port=lambda env: _derived_port(env.get("SLURM_JOB_ID"), _slurm_step(env)), master=_first_slurm_host),
)


def _slurm_plan(env: Mapping[str, str]) -> tuple[tuple[str, int], ...]:
    """srun's nodes with their task counts ("2(x3),1": two tasks on each of three nodes, then one), in rank
    order; empty where the distribution is not by blocks (cyclic puts consecutive ranks on different nodes).
    Both variables are read whatever the distribution: a damaged one is refused, not passed over."""
    counts, hosts = _tasks_per_node(env), _slurm_hosts(env)
    if not env.get("SLURM_DISTRIBUTION", "block").startswith("block") or counts is None or hosts is None:
        return ()
    per_node = [tasks for tasks, nodes in counts for _ in range(nodes)]
    return tuple(zip(hosts, per_node)) if len(hosts) == len(per_node) else ()


def _tasks_per_node(env: Mapping[str, str]) -> list[tuple[int, int]] | None:
    """srun's tasks per node as (tasks, nodes) runs ("8(x2048),4": 8 on each of 2,048 nodes, then 4), counted
    without unfolding them; None where it sets none. A string that is not one, or counts past any job, is
    refused in one line naming the variable."""
    key = next((k for k in _TASKS_PER_NODE if k in env), None)
    if key is None:
        return None
    text = env[key]
    runs = [_tasks_run(key, text, part) for part in text.split(",")]
    nodes, tasks = sum(n for _, n in runs), sum(t * n for t, n in runs)
    if nodes > hostlist.MAX_HOSTS:
        raise UsageError(f"srun set {key}={clipped(text)!r}: {nodes} nodes, more than the {hostlist.MAX_HOSTS} "
                         "a Slurm host list can name")
    if tasks > MAX_WORLD_SIZE:
        raise UsageError(f"srun set {key}={clipped(text)!r}: {tasks} tasks, more than the {MAX_WORLD_SIZE} ranks "
                         "a job may have")
    return runs


def _tasks_run(key: str, text: str, part: str) -> tuple[int, int]:
    match = _TASKS_RUN.fullmatch(part.strip())
    if match is None:
        raise UsageError(f"srun set {key}={clipped(text)!r}: {clipped(part)!r} is not a task count such as 8 "
                         "or 8(x2) (eight on each of two nodes)")
    tasks, nodes = match[1], match[2] or "1"
    # Past 18 digits a count is past every bound here, and int() is not asked to read thousands of digits.
    if len(tasks.lstrip("0")) > 18 or len(nodes.lstrip("0")) > 18:
        raise UsageError(f"srun set {key}={clipped(text)!r}: {clipped(part)!r} counts more tasks or nodes than "
                         "any job has")
    if int(nodes) == 0:
        raise UsageError(f"srun set {key}={clipped(text)!r}: {clipped(part)!r} repeats a count on no node")
    return int(tasks), int(nodes)


def _per_node_plan(size: int, local_size: int | None) -> tuple[tuple[str, int], ...]:
    """torchrun's nodes, each `local_size` ranks, named by their node rank (it knows no host names)."""
    if not local_size or size % local_size:
        return ()
    return tuple((f"the node of GROUP_RANK={k}", local_size) for k in range(size // local_size))


def _outer(env: Mapping[str, str]) -> tuple[str, str, str, str] | None:
    """The launcher around a hand-set seat: its name, and its rank and size variables."""
    if _is_slurm_job(env) and "SLURM_PROCID" in env:
        return "srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"
    if "OMPI_COMM_WORLD_RANK" in env and "OMPI_COMM_WORLD_SIZE" in env:
        return "mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"
    return None


def _check_against_outer(env: Mapping[str, str], rank: int, size: int) -> None:
    """A seat set by hand must be the seat of the launcher around it. One exception: a hand-made spawner that
    starts LOCAL_WORLD_SIZE ranks per task (as torchrun does), whose world is the tasks times that."""
    outer = _outer(env)
    if outer is None:
        return
    name, rank_key, size_key, _ = outer
    try:
        outer_rank, outer_size = int(env[rank_key]), int(env[size_key])
    except ValueError:
        return  # not numbers: that launcher is not the one that started us, and ours is checked
    per_task = size // outer_size if outer_size and size % outer_size == 0 else 0
    if per_task > 1 and env.get("LOCAL_WORLD_SIZE", "").strip() == str(per_task):
        return
    if size != outer_size:
        raise UsageError(f"WORLD_SIZE={size} but {name} started {outer_size} tasks ({size_key}={outer_size}): "
                         f"the job would wait for ranks that never come; unset RANK/WORLD_SIZE under {name}, or set "
                         f"them from {rank_key}/{size_key}")
    if rank != outer_rank:
        raise UsageError(f"RANK={rank} but this is {name}'s task {outer_rank} ({rank_key}={outer_rank}): ranks set by "
                         f"hand the same on every task never meet; unset RANK/WORLD_SIZE under {name}, or set them "
                         f"from {rank_key}/{size_key}")


def _slurm_step(env: Mapping[str, str]) -> str | None:
    """The step id srun gives its tasks (older Slurm names it SLURM_STEPID); a batch script has none."""
    step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") or ""
    return step if re.fullmatch(r"[0-9]+", step) else None


def _is_slurm_job(env: Mapping[str, str]) -> bool:
    # A batch script has SLURM_PROCID=0 too, and `srun --pty bash` is a step of one task: in both a
    # user runs clusterbench by hand. Only a step of several tasks started the ranks.
    return _slurm_step(env) is not None and env.get("SLURM_NTASKS", "1") != "1"


def _number(env: Mapping[str, str], key: str, launcher: str, low: int, high: int, what: str, against: str = "") -> int:
    """The integer `key` holds, refused in one line naming it unless it is `low` to `high`."""
    text = env[key].strip()
    if not _INTEGER.fullmatch(text):
        raise UsageError(f"{launcher} set {key}={clipped(env[key])!r}, which is not an integer")
    # Past 18 digits a number is past every bound here (and, far past, more than int() will read).
    if len(text.lstrip("+-0")) > 18 or not low <= int(text) <= high:
        raise UsageError(f"{launcher} set {key}={clipped(text)}{against}: {what} is {low} to {high}")
    return int(text)


def _seat(env: Mapping[str, str], entry: Launcher, launcher: str) -> tuple[int, int, int, int | None]:
    """The rank, world size, local rank and ranks on this host, each within what the others allow."""
    size = _number(env, entry.size, launcher, 1, MAX_WORLD_SIZE, "a world size")
    of_world = f" with {entry.size}={size}"
    rank = _number(env, entry.rank, launcher, 0, size - 1, "a rank", of_world)
    local_size = _number(env, entry.local_size, launcher, 1, size, "a host's rank count", of_world) \
        if entry.local_size and entry.local_size in env else None
    if entry.local_rank not in env:
        return rank, size, 0, local_size
    of_host = of_world if local_size is None else f" with {entry.local_size}={local_size}"
    local_rank = _number(env, entry.local_rank, launcher, 0, (local_size or size) - 1, "a local rank", of_host)
    return rank, size, local_rank, local_size


def _port(env: Mapping[str, str], launcher: str) -> int | None:
    """MASTER_PORT, where it is set (torchrun sets it; a user may under any launcher)."""
    if not env.get("MASTER_PORT", "").strip():
        return None
    return _number(env, "MASTER_PORT", launcher, 1, 65535, "a port")


def detect(env: Mapping[str, str] | None = None) -> Joined | None:
    """The launcher that started this process, or None when it runs by hand (then it spawns its ranks).
    A seat or port that cannot work is a UsageError naming the variable."""
    env = os.environ if env is None else env
    for entry in LAUNCHERS:
        if entry.rank not in env or entry.size not in env:
            continue
        if entry.name == "srun" and not _is_slurm_job(env):
            _note_batch_script(env)
            return None
        name = entry.name if entry.name != "torchrun" or "TORCHELASTIC_RUN_ID" in env else "environment"
        rank, size, local_rank, local_size = _seat(env, entry, name)
        if name == "environment":
            _check_against_outer(env, rank, size)
        port = _port(env, name)
        # Every rank on this host: rank 0 is here, whatever the launcher knows of addresses.
        here = "127.0.0.1" if local_size == size else None
        return Joined(
            launcher=name, rank=rank, world_size=size, local_rank=local_rank,
            node=env.get(entry.node) if entry.node else None,
            master_addr=env.get("MASTER_ADDR") or entry.master(env) or here,
            master_port=entry.port(env) if port is None else port,
            agent_store=entry.agent_store(env),
            attempt=f"{env.get('TORCHELASTIC_RUN_ID', '')}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
            if name == "torchrun" else "",
            planned=_slurm_plan(env) if entry.name == "srun" else _per_node_plan(size, local_size)
            if entry.size == "WORLD_SIZE" else (),
        )
    return None


def _note_batch_script(env: Mapping[str, str]) -> None:
    nodes = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or "1"
    if nodes != "1":
        print(f"# clusterbench: in a Slurm allocation of {nodes} nodes but not in an srun step of several tasks: "
              "running on this node only; start it with `srun` to use them all", file=sys.stderr)
