"""The soak's dense matmul: torch.mm of two n x n matrices allocated once, at the device's full rate, timed with
the device synchronised (2·n³ FLOP per call), at the size and dtype of the node-check table's `peaks` entry:
bfloat16 8192³ on a GPU (docs/methodology.md §3); float32 512³ on a CPU, where a call takes milliseconds on one
core, so a window's share holds many."""

from __future__ import annotations

import time

import torch

from clusterbench.nodechecks.table import MATMUL_DTYPE, NODE_CHECKS
from clusterbench.runtime.devices import synchronize


def shape(device: torch.device) -> tuple[torch.dtype, int]:
    kind = "cpu" if device.type == "cpu" else "cuda"
    return getattr(torch, MATMUL_DTYPE[kind]), NODE_CHECKS["peaks"].size(kind)


def bytes_needed(device: torch.device) -> int:
    """What its three matrices hold."""
    dtype, n = shape(device)
    return 3 * n * n * dtype.itemsize


class Matmul:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.dtype, self.n = shape(device)
        self.a = torch.randn(self.n, self.n, device=device, dtype=self.dtype)
        self.b = torch.randn(self.n, self.n, device=device, dtype=self.dtype)
        self.out = torch.empty(self.n, self.n, device=device, dtype=self.dtype)
        self._call()  # the library picks its kernel on the first call: not in a timed window
        synchronize(device)

    def _call(self) -> None:
        torch.mm(self.a, self.b, out=self.out)

    def tflops(self, seconds: float, slowdown: float = 1.0) -> float:
        """TFLOP/s of whole calls until `seconds` pass, synchronised once per batch. `slowdown` (a test's fault,
        faults.slowdown) stretches each batch that many times, asleep inside the timed region."""
        calls, batch = 0, 1
        start = time.perf_counter()
        elapsed = 0.0
        while elapsed < seconds or calls == 0:
            began = time.perf_counter()
            for _ in range(batch):
                self._call()
            synchronize(self.device)
            if slowdown > 1:
                time.sleep((slowdown - 1) * (time.perf_counter() - began))
            calls += batch
            elapsed = time.perf_counter() - start
            # The next batch from the rate so far, at most doubling: one sync per batch, and no overrun.
            batch = max(1, min(2 * batch, int((seconds - elapsed) * calls / elapsed)))
        return 2 * self.n**3 * calls / elapsed / 1e12
