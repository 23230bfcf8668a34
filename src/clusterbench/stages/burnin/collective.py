"""An all_reduce timed as the comm sweep times one (stages/comm/timing.py: batches of calls, the slowest rank's
time) and
reported as busbw (the nccl-tests factor of collectives.py), in Gbps, at the size of the node-check table's
`intra_all_reduce` entry: the soak's collective among all the job's ranks, and the fleet's and `check`'s
intra-node one among a node's ranks, measured by this one class."""

from __future__ import annotations

import torch
import torch.distributed as dist

from clusterbench.collectives import COLLECTIVES
from clusterbench.nodechecks.table import NODE_CHECKS
from clusterbench.stages.comm.timing import RankReducer, time_op


def bytes_needed(device: torch.device) -> int:
    return NODE_CHECKS["intra_all_reduce"].size(device.type)


class AllReduce:
    """An all_reduce among `ranks` ranks of `group` (None: the whole job), its buffer allocated once."""

    def __init__(self, device: torch.device, ranks: int, group: dist.ProcessGroup | None = None) -> None:
        self.n = ranks
        self.device = device
        self.group = group
        self.nbytes = bytes_needed(device)
        self.buffer = torch.zeros(self.nbytes // 4, dtype=torch.float32, device=device)
        self.reducer = RankReducer("max", device, ranks, True, group)

    def _call(self) -> None:
        dist.all_reduce(self.buffer, group=self.group)

    def busbw_gbps(self, seconds: float) -> float | None:
        """busbw over about `seconds` (every rank calls it together, with one budget: one decision of when to
        stop); None among one rank, which moves nothing."""
        if self.n < 2:
            return None
        stats = time_op(self._call, self.device, self.reducer, None, 1, seconds, "loop")
        return self.nbytes / stats.mean_s * COLLECTIVES["all_reduce"].busbw_factor(self.n) * 8 / 1e9
