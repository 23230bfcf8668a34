"""The burn-in's per-rank work: this rank's device under sustained load for the soak's duration, window by window
(docs/burnin.md).

Every rank runs the same number of windows, each to its place on a schedule counted from a common start: the
all_reduce among all the job's ranks, a share of the memory test, the deterministic computation, then the dense
matmul until the window's end. Each window's figures of every rank go to rank 0 in one small gather, which is
also where a rank that died is noticed (the harness names it); rank 0 records them (stages/burnin/recorder.py).
Each node's
first rank reads the node's counters and events at the start, in the first window, every COUNTERS_EVERY_S and in
the last window, and sends what they say of the soak so far with its window. A soak cut short (Ctrl-C, a dead
rank) keeps what rank 0 last saved (stages/burnin/recorder.py: every window in burnin.csv, the section at most a second
old) with each node's latest reading, rank 0 reading its own node's once more where it has the time, and is
marked partial.
"""

from __future__ import annotations

import contextlib
import time

import torch.distributed as dist

from clusterbench import faults
from clusterbench.errors import RunFailed
from clusterbench.hw import counters
from clusterbench.runtime.devices import device_name
from clusterbench.runtime.rank import Rank
from clusterbench.stages.burnin import collective, matmul, memory
from clusterbench.stages.burnin.determinism import Repeat
from clusterbench.stages.burnin.plan import BurninPlan
from clusterbench.stages.burnin.recorder import Recorder, Report
from clusterbench.stages.burnin.records import NodeCounters, Window, WrongWord

# A window's time: these shares for the all_reduce (of the window as planned: the timing's stop is decided alike
# on every rank only from a budget they share) and the memory test, the rest the matmul's.
ALLREDUCE_SHARE = 0.15
MEMORY_SHARE = 0.35
# A window behind its schedule (a slow gather, a throttled host) still gets this share of a window's time, and
# its matmul this share of that: a late window is measured, not skipped.
FLOOR = 0.3
# How often a node's counters are read during the soak (a reading takes milliseconds: the kernel's ring buffer, NVML
# and sysfs): a soak cut short keeps what they said this long before.
COUNTERS_EVERY_S = 30.0


def soak(rank: Rank, plan: BurninPlan) -> None:
    worker = rank.worker
    device = worker.device
    rank.progress.at("burnin: allocating")
    member = worker.members[worker.rank] if worker.members else None
    node = (member.node or member.host) if member else "?"
    local_ranks = sum((m.node or m.host) == node for m in worker.members) or 1
    reserved = matmul.bytes_needed(device) + collective.bytes_needed(device)
    region = memory.region_bytes(device, plan.memory_bytes, local_ranks, reserved)  # before the others allocate
    mm, reduce, repeat = matmul.Matmul(device), collective.AllReduce(device, worker.world_size), Repeat(device)
    test = memory.MemoryTest(device, region)
    kind = device_name(device)
    flip_at = faults.flip_second(worker.rank)
    recorder = Recorder(rank.folder, plan, worker.world_size) if rank.folder is not None else None
    leader = worker.rank == min((m.rank for m in worker.members if (m.node or m.host) == node), default=worker.rank)
    watch = _Watch(node) if leader else None
    dist.barrier()  # the schedule's common start
    t0 = time.monotonic()
    overhead = 0.0  # what the last window's gather and records took, past its matmul
    try:
        for k in range(1, plan.windows + 1):
            rank.progress.at(f"burnin window {k} of {plan.windows}")
            faults.at_step(worker.rank, k)
            began = time.monotonic()
            budget = max(FLOOR * plan.window_s, t0 + k * plan.window_s - began - overhead)
            busbw = reduce.busbw_gbps(ALLREDUCE_SHARE * plan.window_s)  # one budget on every rank: one decision
            flip = flip_at is not None and time.monotonic() - t0 >= flip_at
            flip_at = None if flip else flip_at
            tested = test.run(MEMORY_SHARE * budget, flip)
            digest = repeat.digest()
            left = max(began + budget - time.monotonic(), FLOOR * (1 - ALLREDUCE_SHARE - MEMORY_SHARE) * budget)
            tflops = mm.tflops(left, faults.slowdown(worker.rank, time.monotonic() - t0))
            ended = time.monotonic()
            t_s = ended - t0
            window = Window(worker.rank, node, str(device), kind, t_s, tflops, tested.gbps, busbw, tested.wrong,
                            digest == repeat.first, digest)
            words = [WrongWord(worker.rank, str(device), t_s, offset, WrongWord.text(wrote), WrongWord.text(read))
                     for offset, wrote, read in tested.words]
            read = watch.read(t_s, last=k == plan.windows) if watch is not None else None
            reports: list[Report | None] | None = [None] * worker.world_size if recorder is not None else None
            dist.gather_object(Report(window, words, test.nbytes, read), reports, dst=0)
            if recorder is not None:
                recorder.add([r for r in reports if r is not None], t_s)
            overhead = time.monotonic() - ended
    except BaseException:
        if recorder is not None:
            with contextlib.suppress(RunFailed):  # the soak's own error is the one to report
                if watch is not None:
                    recorder.read(watch.read(time.monotonic() - t0, last=True))
                recorder.finish(time.monotonic() - t0, partial=True)
        raise
    if recorder is not None:
        recorder.finish(time.monotonic() - t0, partial=False)


class _Watch:
    """A node's counters and events over the soak, read by its first rank: what they say from the start on."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.gpus = counters.node_gpus()
        self.before = counters.snapshot(self.gpus)
        self.last_s = 0.0

    def read(self, t_s: float, last: bool) -> NodeCounters | None:
        """What the counters say now, in the first window, where COUNTERS_EVERY_S passed since the last reading, or
        `last`; else None."""
        if not last and self.last_s and t_s - self.last_s < COUNTERS_EVERY_S:
            return None
        self.last_s = t_s
        counts, found = counters.soaked(self.before, counters.snapshot(self.gpus))
        return NodeCounters(self.node, counts, found, t_s)
