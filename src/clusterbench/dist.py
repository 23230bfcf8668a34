"""Process groups: the backend and device chosen once in the parent, then every rank joined and pinned."""

from __future__ import annotations

import datetime
import math
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from clusterbench.devices import local_device_count
from clusterbench.errors import UsageError
from clusterbench.rendezvous import Member

KNOWN_BACKENDS = ("nccl", "gloo", "mpi")


@dataclass(frozen=True)
class DistConfig:
    """What every worker needs to join the process group; chosen once, in the parent."""

    backend: str
    device_type: str
    timeout_s: float


@dataclass(frozen=True)
class Worker:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    timeout_s: float
    members: tuple[Member, ...]  # every rank of the job, as it joined

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def resolve(backend: str = "auto", device: str | None = None, timeout_s: float = 300.0) -> DistConfig:
    """Turn --backend/--device into a concrete pair, refusing what this machine cannot do."""
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise UsageError(f"--timeout must be a positive number of seconds, got {timeout_s:g}")
    backend = backend.lower()
    has_cuda = torch.cuda.is_available()
    device_type = (device or ("cuda" if has_cuda and backend in ("auto", "nccl") else "cpu")).split(":")[0]
    if device_type == "cuda" and not has_cuda:
        raise UsageError("--device cuda: no CUDA device is visible on this machine")
    if backend == "auto":
        backend = "nccl" if device_type == "cuda" else "gloo"
    if backend == "nccl":
        if not has_cuda:
            raise UsageError("backend nccl needs CUDA GPUs and this machine has none; use --backend gloo")
        if device_type != "cuda":
            raise UsageError("backend nccl works on CUDA tensors only; drop --device cpu or use gloo")
        if not dist.is_nccl_available():
            raise UsageError("this torch build has no NCCL support")
    elif backend == "gloo":
        if not dist.is_gloo_available():
            raise UsageError("this torch build has no Gloo support")
    elif backend == "mpi":
        if not dist.is_mpi_available():
            raise UsageError("this torch build has no MPI support (build torch from source with MPI)")
    elif not _is_registered(backend):
        raise UsageError(
            f"unknown backend {backend!r}: this torch knows {', '.join(KNOWN_BACKENDS)} "
            "and no plug-in registered that name"
        )
    if device_type not in ("cpu", "cuda") and not hasattr(torch, device_type):
        raise UsageError(f"unknown device type {device_type!r}")
    return DistConfig(backend=backend, device_type=device_type, timeout_s=timeout_s)


def _is_registered(backend: str) -> bool:
    # Vendor backends (hccl, xccl, ...) register themselves with c10d when their package is imported.
    return backend.upper() in {b.upper() for b in dist.Backend.backend_list}


def init(cfg: DistConfig, rank: int, world_size: int, local_rank: int, store: dist.Store,
         members: list[Member]) -> Worker:
    """Form the process group and pin this rank to its device."""
    if cfg.device_type == "cpu":
        device = torch.device("cpu")
        # Ranks on one host share its cores (even when containers or namespaces make them separate
        # nodes): split the cores between them rather than let them fight.
        local_world = sum(m.host == members[rank].host for m in members)
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, local_world)))
    else:
        count = local_device_count(cfg.device_type)
        device = torch.device(cfg.device_type, local_rank % max(1, count))
        getattr(torch, cfg.device_type).set_device(device)
    timeout = datetime.timedelta(seconds=cfg.timeout_s)
    kwargs = {"device_id": device} if cfg.backend == "nccl" else {}
    dist.init_process_group(cfg.backend, store=store, rank=rank, world_size=world_size, timeout=timeout, **kwargs)
    return Worker(rank, world_size, local_rank, device, cfg.backend, cfg.timeout_s, tuple(members))
