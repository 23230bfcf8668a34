"""The facts every run.json records about where it ran, gathered from every rank."""

from __future__ import annotations

import platform
import socket

import torch
import torch.distributed as dist

from clusterbench import __version__
from clusterbench.hw import affinity
from clusterbench.results.run import Env, Placement
from clusterbench.runtime.devices import device_name
from clusterbench.runtime.dist import Worker


def backend_version(backend: str) -> str:
    if backend == "nccl" and torch.cuda.is_available():
        return ".".join(str(v) for v in torch.cuda.nccl.version())
    return f"bundled with torch {torch.__version__}"


def environment(worker: Worker) -> Env:
    """Facts every run.json records; a collective, so every rank calls it."""
    mine = (device_name(worker.device), str(worker.device), *affinity.mine(worker.device))
    everyone: list[tuple] = [()] * worker.world_size
    dist.all_gather_object(everyone, mine)
    return Env(
        hostname=socket.gethostname(),
        python=platform.python_version(),
        platform=platform.platform(),
        clusterbench=__version__,
        torch=torch.__version__,
        cuda=torch.version.cuda,
        backend=worker.backend,
        backend_version=backend_version(worker.backend),
        world_size=worker.world_size,
        device_type=worker.device.type,
        hosts=sorted({m.host for m in worker.members}),
        devices=[name for name, *_ in everyone],
        ranks=[Placement(m.rank, m.node, m.local_rank, *facts) for m, (_, *facts) in zip(worker.members, everyone)],
    )
