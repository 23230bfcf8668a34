"""The burn-in's per-rank work: this rank's device under sustained load for the soak's duration, window by window
(docs/burnin.md).

Every rank runs the same number of windows, each to its place on a schedule counted from a common start: the
all_reduce among all the job's ranks, a share of the memory test, the deterministic computation, then the dense
matmul until the window's end. Each window's figures of every rank go to rank 0 in one small gather, which is
also where a rank that died is noticed (the harness names it); rank 0 appends them to burnin.csv at once, records
the section in run.json every so often, and prints a line of the figures so far. A soak cut short (Ctrl-C, a
dead rank) leaves its section with every window it measured, marked partial.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, replace

import torch.distributed as dist

from clusterbench import faults
from clusterbench.burnin import collective, matmul, memory
from clusterbench.burnin.determinism import Repeat
from clusterbench.burnin.plan import BurninPlan
from clusterbench.devices import device_name
from clusterbench.errors import RunFailed
from clusterbench.hw import counters
from clusterbench.rank import Rank
from clusterbench.results.burnin import TABLE, Burnin, Window, WrongWord
from clusterbench.results.findings import Finding
from clusterbench.results.folder import RunFolder

# A window's time: these shares for the all_reduce (of the window as planned: the timing's stop is decided alike
# on every rank only from a budget they share) and the memory test, the rest the matmul's.
ALLREDUCE_SHARE = 0.15
MEMORY_SHARE = 0.35
# A window behind its schedule (a slow gather, a throttled host) still gets this share of a window's time, and
# its matmul this share of that: a late window is measured, not skipped.
FLOOR = 0.3
KEPT = 64  # the wrong words the section keeps, of all ranks


@dataclass(frozen=True)
class _Report:
    """What one rank sends rank 0 each window."""

    window: Window
    wrong: list[WrongWord]
    region_bytes: int


def soak(rank: Rank, plan: BurninPlan) -> None:
    worker = rank.worker
    device = worker.device
    rank.progress.at("burnin: allocating")
    member = worker.members[worker.rank] if worker.members else None
    node = (member.node or member.host) if member else "?"
    local_ranks = sum((m.node or m.host) == node for m in worker.members) or 1
    reserved = matmul.bytes_needed(device) + collective.bytes_needed(device)
    region = memory.region_bytes(device, plan.memory_bytes, local_ranks, reserved)  # before the others allocate
    mm, reduce, repeat = matmul.Matmul(device), collective.AllReduce(worker), Repeat(device)
    test = memory.MemoryTest(device, region)
    kind = device_name(device)
    flip_at = faults.flip_second(worker.rank)
    recorder = _Recorder(rank.folder, plan) if rank.folder is not None else None
    # The node's first rank watches its counters over the soak: what grows under load (link flaps, ECC, Xids).
    leader = worker.rank == min((m.rank for m in worker.members if (m.node or m.host) == node), default=worker.rank)
    before = counters.snapshot(counters.visible_gpus()) if leader else None
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
            reports: list[_Report | None] | None = [None] * worker.world_size if recorder is not None else None
            dist.gather_object(_Report(window, words, test.nbytes), reports, dst=0)
            if recorder is not None:
                recorder.add([r for r in reports if r is not None], t_s)
            overhead = time.monotonic() - ended
    except BaseException:
        if recorder is not None:
            with contextlib.suppress(RunFailed):  # the soak's own error is the one to report
                recorder.finish(time.monotonic() - t0, partial=True)
        raise
    grew = [] if before is None else [replace(f, subject=f"{f.subject} on {node}", node=node) for f in
                                      counters.growth(before, counters.snapshot(counters.visible_gpus()))]
    found: list[list[Finding] | None] | None = [None] * worker.world_size if recorder is not None else None
    dist.gather_object(grew, found, dst=0)
    if recorder is not None:
        recorder.section = replace(recorder.section, counters=[f for part in found or [] for f in part or []])
        recorder.finish(time.monotonic() - t0, partial=False)


class _Recorder:
    """Rank 0's record of the soak: each window's rows onto burnin.csv at once, the section into run.json
    every so often (and whole at the end), a line of the figures."""

    def __init__(self, folder: RunFolder, plan: BurninPlan) -> None:
        self.folder = folder
        self.section = Burnin(plan.duration_s, plan.window_s, plan.level, tolerance=plan.tolerance)
        self.wrong = 0

    def add(self, reports: list[_Report], t_s: float) -> None:
        rows = [r.window for r in reports]
        self.folder.append_csv(TABLE, rows)
        self.wrong += sum(w.wrong_words for w in rows)
        self.section = replace(self.section, memory_bytes=min(r.region_bytes for r in reports), elapsed_s=t_s,
                               windows=self.section.windows + rows,
                               wrong=(self.section.wrong + [w for r in reports for w in r.wrong])[:KEPT])
        self.folder.record_extra(TABLE, self.section, self.folder.hot_interval_s)
        print(progress_line(rows, self.section.duration_s - t_s, self.wrong), flush=True)

    def finish(self, elapsed_s: float, partial: bool) -> None:
        self.section = replace(self.section, elapsed_s=elapsed_s, partial=partial)
        self.folder.record_extra(TABLE, self.section)


def clock(seconds: float) -> str:
    """12:05 or 1:02:05."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:02d}:{rest % 60:02d}"


def progress_line(rows: list[Window], left_s: float, wrong: int) -> str:
    """`# burnin 00:42 left: cpu 0.21 TFLOP/s, memory 5.1 GB/s, busbw 3.2 Gbps, 0 wrong words`: the window's
    lowest figures among its devices, and the wrong words so far."""
    def lowest(figure: str) -> float | None:
        values = [getattr(w, figure) for w in rows if getattr(w, figure) is not None]
        return min(values) if values else None

    kinds = "/".join(sorted({w.device.split(":")[0] for w in rows}))
    parts = [f"{kinds} {lowest('matmul_tflops'):.3g} TFLOP/s", f"memory {lowest('memory_gbps'):.3g} GB/s"]
    busbw = lowest("busbw_gbps")
    if busbw is not None:
        parts.append(f"busbw {busbw:.3g} Gbps")
    parts.append(f"{wrong} wrong words")
    among = f" (the lowest of {len(rows)} devices)" if len(rows) > 1 else ""
    return f"# burnin {clock(left_s)} left: {', '.join(parts)}{among}"
