"""What is known of a job before any rank starts: how many ranks, on which device and backend."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JobShape:
    world_size: int
    device_type: str  # cpu, cuda, or a vendor's device type
    backend: str  # the torch.distributed backend: gloo, nccl, mpi or a vendor's
    local_ranks: int | None  # the ranks this host starts; None under a launcher, which starts them
