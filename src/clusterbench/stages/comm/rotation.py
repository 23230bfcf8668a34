"""Buffers whose offset moves every call, as nccl-tests moves them (docs/methodology.md §1, Timing).

nccl-tests allocates its buffers once for the sweep's largest size and runs call i of a size at
offset (i mod steps) x the size, steps = the largest size // the size (common.cu, startColl):
consecutive calls walk through the whole allocation, so a size that fits in a cache is not timed
on a buffer the previous call left warm there. The sweep does the same with an Arena: zeroed
memory of the largest size per buffer of the op, allocated when first needed, lent to every size
that fits in it at least twice, and handed back for the sizes that do not. Each buffer of the op
gets its own stretch of windows, a view the op shares with another (an in-place chunk) stays
inside its window, and every window stays zero, since every collective of zeros gives zeros. At
most MAX_WINDOWS windows are walked, so a tiny message never needs millions of views: the walk
spans min(largest size, MAX_WINDOWS x size).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace

import torch

from clusterbench.stages.comm.ops import Buffers, Ctx, Op

MAX_WINDOWS = 1024
META = torch.device("meta")


class Arena:
    """Zeroed byte buffers of `nbytes` each, one per buffer of an op, lent to every size in turn."""

    def __init__(self, nbytes: int, device: torch.device) -> None:
        self.nbytes, self.device = nbytes, device
        self._slots: list[torch.Tensor] = []

    def slot(self, i: int) -> torch.Tensor:
        while len(self._slots) <= i:
            # zeros, not empty: the pages are touched now, not in the first timed calls
            self._slots.append(torch.zeros(self.nbytes, dtype=torch.uint8, device=self.device))
        return self._slots[i]

    def release(self) -> None:
        """Hand the memory back: the sizes too large to move (and their check) need it."""
        self._slots = []


def windows(op: Op, ctx: Ctx, arena: Arena) -> list[Buffers] | None:
    """The op's buffers at consecutive offsets of the arena, in the order the calls take them; None,
    and the arena's memory handed back, where the op's largest buffer does not fit in it twice
    (nccl-tests: steps = 1). The op lays its buffers out on the meta device, so nothing of the size
    is allocated to learn them; each is a flat tensor or a slice of one (stages/comm/ops.py)."""
    layout = op.buffers(replace(ctx, device=META, values=replace(ctx.values, device=META)))
    bases = {id(_base(t)): _base(t) for t in layout.values()}
    largest = max((b.numel() * b.element_size() for b in bases.values()), default=0)
    steps = arena.nbytes // largest if largest else 0
    if steps < 2:
        arena.release()
        return None
    count = min(steps, MAX_WINDOWS)
    grids = {}
    for i, (key, base) in enumerate(bases.items()):
        flat = arena.slot(i)[:count * base.numel() * base.element_size()].view(base.dtype)
        grids[key] = flat.view(count, base.numel())
    views = {}
    for name, t in layout.items():
        start = t.storage_offset() - _base(t).storage_offset()
        views[name] = grids[id(_base(t))][:, start:start + t.numel()].unbind(0)
    return [dict(zip(views, row)) for row in zip(*views.values())]


def _base(t: torch.Tensor) -> torch.Tensor:
    """The tensor that owns t's memory: t itself, or what t is a slice of (an in-place chunk)."""
    return t if t._base is None else t._base


def rotating(op: Op, ctx: Ctx, buffers: list[Buffers]) -> Callable[[], None]:
    """One call of the op per call of the result, each on the next window, round and round: a
    partial's cost and a step of a cycle, so moving costs the timed calls nothing measurable."""
    turn = itertools.cycle(buffers)
    run = op.run
    return lambda: run(ctx, next(turn))
