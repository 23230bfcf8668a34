"""The soak's collective: an all_reduce among all the job's ranks in a loop, timed as the comm sweep times one
(comm/timing.py: the slowest rank's time), as busbw (the nccl-tests factor of collectives.py), in Gbps."""

from __future__ import annotations

import torch
import torch.distributed as dist

from clusterbench.collectives import COLLECTIVES
from clusterbench.comm.timing import RankReducer, time_op
from clusterbench.dist import Worker

# Bandwidth-bound on each: the largest sizes of the sweep's defaults.
BYTES = {"cpu": 4 << 20}
GPU_BYTES = 256 << 20


def bytes_needed(device: torch.device) -> int:
    return BYTES.get(device.type, GPU_BYTES)


class AllReduce:
    def __init__(self, worker: Worker) -> None:
        self.n = worker.world_size
        self.device = worker.device
        self.nbytes = bytes_needed(worker.device)
        self.buffer = torch.zeros(self.nbytes // 4, dtype=torch.float32, device=worker.device)
        self.reducer = RankReducer("max", worker.device, self.n, True)

    def _call(self) -> None:
        dist.all_reduce(self.buffer)

    def busbw_gbps(self, seconds: float) -> float | None:
        """busbw over about `seconds` (every rank calls it together); None for a job of one rank, which moves
        nothing."""
        if self.n < 2:
            return None
        stats = time_op(self._call, self.device, self.reducer, None, 1, seconds, "loop")
        return self.nbytes / stats.mean_s * COLLECTIVES["all_reduce"].busbw_factor(self.n) * 8 / 1e9
