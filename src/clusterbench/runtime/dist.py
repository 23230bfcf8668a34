"""Process groups: the backend and device chosen once in the parent, then every rank joined and pinned.

Two timeouts: the rendezvous timeout bounds the launch (meeting at the store, and Gloo's group
forming, where a rank that cannot reach another would otherwise wait the whole collective timeout
in silence), the collective timeout everything after. Gloo finds its own address from the host
name, and falls back to loopback where that name does not resolve (node names missing from DNS
and /etc/hosts, as on a cluster whose names only its scheduler knows): across hosts every rank
would then dial itself. Where the job spans hosts and the name gives no usable address, the
interface that routes to rank 0 is the one that reaches the others.
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import math
import os
import socket
import struct
from dataclasses import dataclass

import torch
import torch.distributed as dist

from clusterbench.argtypes import clipped, real
from clusterbench.errors import RunFailed, UsageError
from clusterbench.runtime.devices import local_device_count
from clusterbench.runtime.rendezvous import RESOLVE_S, Member, answer_within

# The rendezvous timeout unless --rendezvous-timeout or this variable says otherwise: long enough for
# every rank of a large job to start Python and torch on a loaded file system, and short of the
# collectives' timeout, so that a launch that cannot work says so within a minute.
RENDEZVOUS_S = 60.0
RENDEZVOUS_ENV = "CLUSTERBENCH_RENDEZVOUS_TIMEOUT"
_SIOCGIFADDR = 0x8915

KNOWN_BACKENDS = ("nccl", "gloo", "mpi")


@dataclass(frozen=True)
class DistConfig:
    """What every worker needs to join the process group; chosen once, in the parent."""

    backend: str
    device_type: str
    timeout_s: float
    rendezvous_s: float = RENDEZVOUS_S


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


def resolve(backend: str = "auto", device: str | None = None, timeout_s: float = 300.0,
            rendezvous_s: float | None = None) -> DistConfig:
    """Turn --backend/--device into a concrete pair, refusing what this machine cannot do; the rendezvous
    timeout is --rendezvous-timeout, else CLUSTERBENCH_RENDEZVOUS_TIMEOUT, else 60 s, never above --timeout."""
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise UsageError(f"--timeout must be a positive number of seconds, got {timeout_s:g}")
    if rendezvous_s is None:
        rendezvous_s = _rendezvous_from_env()
    if not (math.isfinite(rendezvous_s) and rendezvous_s > 0):
        raise UsageError(f"--rendezvous-timeout must be a positive number of seconds, got {rendezvous_s:g}")
    rendezvous_s = min(rendezvous_s, timeout_s)
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
    return DistConfig(backend=backend, device_type=device_type, timeout_s=timeout_s, rendezvous_s=rendezvous_s)


def _rendezvous_from_env() -> float:
    text = os.environ.get(RENDEZVOUS_ENV, "").strip()
    if not text:
        return RENDEZVOUS_S
    try:
        return real()(text)  # as --rendezvous-timeout's own values are read: finite, above 0
    except argparse.ArgumentTypeError:
        raise UsageError(f"{RENDEZVOUS_ENV}={clipped(text)!r}: give a positive number of seconds") from None


def _is_registered(backend: str) -> bool:
    # Vendor backends (hccl, xccl, ...) register themselves with c10d when their package is imported.
    return backend.upper() in {b.upper() for b in dist.Backend.backend_list}


def init(cfg: DistConfig, rank: int, world_size: int, local_rank: int, store: dist.Store,
         members: list[Member], rank0_addr: str = "127.0.0.1") -> Worker:
    """Form the process group (within the rendezvous timeout, for Gloo) and pin this rank to its device."""
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
    if cfg.backend != "gloo":  # NCCL's own bootstrap forms its group, and may take minutes on many nodes
        dist.init_process_group(cfg.backend, store=store, rank=rank, world_size=world_size, timeout=timeout, **kwargs)
        return Worker(rank, world_size, local_rank, device, cfg.backend, cfg.timeout_s, tuple(members))
    via = _gloo_route(members, rank0_addr)
    try:
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=cfg.rendezvous_s))
    except RuntimeError as e:
        gist = str(e).split("] ")[-1].splitlines()[0] if str(e) else type(e).__name__
        raise RunFailed(f"rank {rank} ({members[rank].node}): the Gloo group did not form within {cfg.rendezvous_s:g} s "
                        f"after all ranks met ({clipped(gist)}); Gloo talks over {via}: set --iface to the interface "
                        "between the hosts") from None
    dist.distributed_c10d._set_pg_timeout(timeout)
    return Worker(rank, world_size, local_rank, device, cfg.backend, cfg.timeout_s, tuple(members))


def _gloo_route(members: list[Member], rank0_addr: str) -> str:
    """Where Gloo will talk, as the line of a group that does not form names it; sets GLOO_SOCKET_IFNAME to
    the interface that reaches rank 0 where the job spans hosts and this host's name gives Gloo no address."""
    chosen = os.environ.get("GLOO_SOCKET_IFNAME")
    if chosen:
        return f"GLOO_SOCKET_IFNAME={chosen}"
    host = socket.gethostname()
    if len({m.node for m in members}) == 1 or _usable(host):
        return f"the address of this host's name {host!r}"
    iface = _interface_toward(rank0_addr)
    if iface is None:
        return f"loopback ({host!r} does not resolve to an address of this host)"
    os.environ["GLOO_SOCKET_IFNAME"] = iface
    return f"{iface}, the interface toward rank 0's {rank0_addr} ({host!r} does not resolve here)"


def _usable(host: str) -> bool:
    """Whether `host` resolves, within RESOLVE_S, to an address other hosts can reach: not loopback (Debian
    names the host 127.0.1.1)."""
    try:
        infos = answer_within(lambda: socket.getaddrinfo(host, None, socket.AF_INET), RESOLVE_S)
    except (OSError, ValueError):  # TimeoutError too: a resolver that does not answer hangs Gloo's own lookup
        return False
    return any(not info[4][0].startswith("127.") for info in infos)


def _interface_toward(addr: str) -> str | None:
    """The interface this host sends to `addr` from: the one holding the source address the kernel picks."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((addr, 9))  # UDP: picks a route, sends nothing
            source = probe.getsockname()[0]
            for _, name in socket.if_nameindex():
                request = struct.pack("256s", name.encode()[:15])
                try:
                    if socket.inet_ntoa(fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)[20:24]) == source:
                        return name
                except OSError:  # an interface without an IPv4 address
                    continue
    except OSError:  # no route at all, or an IPv6-only rank 0
        return None
    return None
