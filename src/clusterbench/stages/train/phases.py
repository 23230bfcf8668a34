"""Each rank's step split into phases by its own clocks: data, forward, backward, sync, optimizer.

A step is a run of marks; each mark closes the phase it names, which began at the mark before
(the step's start for the first). The loop marks after the batch reaches the device (data), after
each micro-batch's loss (forward), when the rank's own backward compute is done (backward), when
backward returns (sync), after clip + step + zero_grad (optimizer) and after the loss all-reduce
(sync again: it is a collective every rank waits on). The phases therefore add up to the step.

The end of this rank's own backward compute is the gradient of the input embedding's output:
the autograd engine reaches it last, after every layer, since nothing is computed before the
embedding. A tensor hook on that output (registered by a forward hook on the embedding module, so
it is set on every micro-batch's output) marks it. What follows until backward returns is the
embedding's own weight gradient (one scatter of the batch's rows, small beside the layers) and
the wait for the gradient collectives DDP launched bucket by bucket during backward and waits
on at its end: a fast rank waits there for the slowest. Under FSDP the ranks also meet at every
layer's parameter all-gather in forward and backward and at clip_grad_norm's all-reduce in the
optimizer, so there a fast rank's wait is spread through its forward and backward too.

On a GPU a mark records a CUDA event on the current stream, so it times when the device got
there, not when the host queued the work; the events are read once per step after the loop's
own synchronize, never with an extra synchronize inside the step. On a CPU a mark is
time.perf_counter(). Only the timed window's steps are summed; means() is seconds per step.
"""

from __future__ import annotations

import time
from typing import Any

import torch

PHASES = ("data", "forward", "backward", "sync", "optimizer")


class PhaseClock:
    """The marks of the current step and the per-phase sums over the window's steps."""

    def __init__(self, device: torch.device, enabled: bool = True) -> None:
        self.cuda = device.type == "cuda"
        self.enabled = enabled
        self.marks: list[tuple[str, Any]] = []
        self.start: Any = None
        self.totals = dict.fromkeys(PHASES, 0.0)
        self.steps = 0

    def _now(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def begin(self) -> None:
        if self.enabled:
            self.start, self.marks = self._now(), []

    def mark(self, phase: str) -> None:
        if self.enabled:
            self.marks.append((phase, self._now()))

    def end(self, in_window: bool) -> None:
        """Called after the step's synchronize: its events have all completed."""
        if not (self.enabled and in_window):
            return
        before = self.start
        for phase, at in self.marks:
            self.totals[phase] += before.elapsed_time(at) / 1e3 if self.cuda else at - before
            before = at
        self.steps += 1

    def means(self) -> dict[str, float]:
        """Seconds per window step of each phase (zeros when no step was timed)."""
        return {p: t / self.steps if self.steps else 0.0 for p, t in self.totals.items()}

    def watch_embedding(self, embedding: torch.nn.Module) -> torch.utils.hooks.RemovableHandle:
        """Mark "backward" when autograd reaches the embedding's output: see the module docstring."""

        def on_forward(_module: torch.nn.Module, _inputs: Any, output: torch.Tensor) -> None:
            if self.enabled and output.requires_grad:
                output.register_hook(lambda _grad: self.mark("backward"))

        return embedding.register_forward_hook(on_forward)
