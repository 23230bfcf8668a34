"""The soak's deterministic computation: the same work on the same inputs in every window, its result's bytes
hashed. A device that computes right gives its first result bit for bit every time, and the same as every other
device of its kind; one that does not is corrupting silently (docs/burnin.md)."""

from __future__ import annotations

import hashlib

import torch

from clusterbench.runtime.devices import synchronize

SEED = 20240611
# A chain of matmuls and a nonlinearity: every output bit depends on every input, in milliseconds.
CPU_SHAPE = (192, 6)  # n, steps
GPU_SHAPE = (2048, 16)


class Repeat:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        n, self.steps = CPU_SHAPE if device.type == "cpu" else GPU_SHAPE
        g = torch.Generator().manual_seed(SEED)
        self.x = torch.randn(n, n, generator=g).to(device)
        self.w = (torch.randn(n, n, generator=g) / n**0.5).to(device)
        # Before the soak (its first call loads torch's deterministic kernels, for seconds): what every window's
        # result must repeat.
        self.first = self.digest()

    def digest(self) -> str:
        """The hash of this window's result bytes."""
        # One thread and deterministic kernels: a float32 sum split over other threads adds in another order,
        # which would set healthy devices of one kind apart.
        threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
        torch.set_num_threads(1)
        torch.use_deterministic_algorithms(True, warn_only=True)
        try:
            y = self.x
            for _ in range(self.steps):
                y = torch.tanh(y @ self.w)
            synchronize(self.device)
            return hashlib.blake2b(y.cpu().numpy().tobytes(), digest_size=16).hexdigest()
        finally:
            torch.use_deterministic_algorithms(deterministic)
            torch.set_num_threads(threads)
