"""Which launcher started this process, and what it says about our place in the job.

Each launcher is one entry of LAUNCHERS: the variables that carry the rank, the world size,
the local rank and the node, and how rank 0's address and a port follow from them. torchrun
and a hand-set RANK/WORLD_SIZE come first because they also run inside srun and mpirun
allocations; a Slurm batch script (SLURM_PROCID=0 but no step) and a one-task step (`srun
--pty bash`) are not launchers: there the user runs clusterbench by hand.
"""

from __future__ import annotations

import os
import re
import sys
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from clusterbench.errors import UsageError

# Ports derived from a job id fall in this range: above the well-known and registered ports
# most services take, below Linux's default ephemeral range (32768+), so no client port holds one.
PORT_BASE, PORT_SPAN = 15000, 15000


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

    @property
    def hosts_store(self) -> bool:
        return self.rank == 0 and not self.agent_store


@dataclass(frozen=True)
class Launcher:
    name: str
    rank: str
    size: str
    local_rank: str
    node: str | None
    master: Callable[[Mapping[str, str]], str | None]  # rank 0's host, when the launcher tells
    port: Callable[[Mapping[str, str]], int | None]  # a port every rank derives alike
    agent_store: Callable[[Mapping[str, str]], bool] = lambda env: False


def _derived_port(*parts: str | None) -> int | None:
    """A port every rank of one job computes alike from the launcher's job id (and step)."""
    if any(not p for p in parts):
        return None
    # A numeric id as it is; another (a PMIx namespace "prterun-host-123@1") through a stable hash.
    numbers = [int(p) if p.isdigit() else zlib.crc32(p.encode()) for p in parts]
    return PORT_BASE + sum(n * 7919**i for i, n in enumerate(numbers)) % PORT_SPAN


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host lists: "gpu[01-03,07],login1" -> gpu01 gpu02 gpu03 gpu07 login1."""
    hosts: list[str] = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", text):
        if plain:
            hosts.append(plain)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if not hi:
                hosts.append(prefix + lo)
                continue
            hosts.extend(f"{prefix}{i:0{len(lo)}d}" for i in range(int(lo), int(hi) + 1))
    return hosts


def _first_slurm_host(env: Mapping[str, str]) -> str | None:
    nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    hosts = expand_hostlist(nodes) if nodes else []
    return hosts[0] if hosts else None


def _same_host_only(size: str, local_size: str) -> Callable[[Mapping[str, str]], str | None]:
    # Every rank on this host: rank 0 is here, whatever the launcher knows of addresses.
    return lambda env: "127.0.0.1" if env.get(size) and env.get(size) == env.get(local_size) else None


LAUNCHERS = (
    Launcher("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK",
             master=lambda env: None, port=lambda env: None,
             agent_store=lambda env: env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"),
    Launcher("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", None,
             master=_same_host_only("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"),
             port=lambda env: _derived_port(env.get("OMPI_MCA_ess_base_jobid") or env.get("PMIX_NAMESPACE"))),
    Launcher("mpirun", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", None,
             master=_same_host_only("PMI_SIZE", "MPI_LOCALNRANKS"), port=lambda env: None),
    Launcher("srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID",
             master=_first_slurm_host,
             port=lambda env: _derived_port(env.get("SLURM_JOB_ID"), _slurm_step(env))),
)


def _slurm_step(env: Mapping[str, str]) -> str | None:
    """The step id srun gives its tasks (older Slurm names it SLURM_STEPID); a batch script has none."""
    step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") or ""
    return step if step.isdigit() else None


def _is_slurm_job(env: Mapping[str, str]) -> bool:
    # A batch script has SLURM_PROCID=0 too, and `srun --pty bash` is a step of one task: in both a
    # user runs clusterbench by hand. Only a step of several tasks started the ranks.
    return _slurm_step(env) is not None and env.get("SLURM_NTASKS", "1") != "1"


def _int(env: Mapping[str, str], key: str, launcher: str) -> int:
    try:
        return int(env[key])
    except ValueError:
        raise UsageError(f"{launcher} set {key}={env[key]!r}, which is not an integer") from None


def detect(env: Mapping[str, str] | None = None) -> Joined | None:
    """The launcher that started this process, or None when it runs by hand (then it spawns its ranks)."""
    env = os.environ if env is None else env
    for entry in LAUNCHERS:
        if entry.rank not in env or entry.size not in env:
            continue
        if entry.name == "srun" and not _is_slurm_job(env):
            _note_batch_script(env)
            return None
        name = entry.name if entry.name != "torchrun" or "TORCHELASTIC_RUN_ID" in env else "environment"
        return Joined(
            launcher=name,
            rank=_int(env, entry.rank, name),
            world_size=_int(env, entry.size, name),
            local_rank=_int(env, entry.local_rank, name) if entry.local_rank in env else 0,
            node=env.get(entry.node) if entry.node else None,
            master_addr=env.get("MASTER_ADDR") or entry.master(env),
            master_port=int(env["MASTER_PORT"]) if env.get("MASTER_PORT", "").isdigit() else entry.port(env),
            agent_store=entry.agent_store(env),
            attempt=f"{env.get('TORCHELASTIC_RUN_ID', '')}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
            if name == "torchrun" else "",
        )
    return None


def _note_batch_script(env: Mapping[str, str]) -> None:
    nodes = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or "1"
    if nodes != "1":
        print(f"# clusterbench: in a Slurm allocation of {nodes} nodes but not in an srun step of several tasks: "
              "running on this node only; start it with `srun` to use them all", file=sys.stderr)
