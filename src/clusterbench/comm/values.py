"""Buffer contents: zeros while timing, exact rank- and index-dependent values for the check.

The check values are small integers chosen per dtype so that every reduction over n ranks
is exactly representable (bfloat16 holds integers up to 256 exactly, float16 up to 2048),
which lets the check demand bit-exact results instead of a tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int32": torch.int32,
    "int64": torch.int64,
    "int8": torch.int8,
    "uint8": torch.uint8,
}
DTYPE_ALIASES = {"fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16",
                 "fp64": "float64", "double": "float64", "float": "float32"}

# The largest integer each dtype holds exactly.
_EXACT = {
    torch.float16: 2048, torch.bfloat16: 256, torch.float32: 2**24, torch.float64: 2**53,
    torch.int8: 127, torch.uint8: 255, torch.int32: 2**31 - 1, torch.int64: 2**63 - 1,
}
_MODULUS = 251  # prime, so chunk offsets and rank strides do not line up


def dtype_named(name: str) -> torch.dtype:
    return DTYPES[DTYPE_ALIASES.get(name, name)]


@dataclass(frozen=True)
class Values:
    dtype: torch.dtype
    device: torch.device
    reduce_op: str | None  # the reduction the values must survive exactly; None for data movement
    n: int
    zeros: bool  # timing buffers: zeros keep repeated in-place reductions free of overflow

    @property
    def modulus(self) -> int:
        limit = _EXACT[self.dtype]
        if self.reduce_op in ("sum", "avg"):
            return max(1, min(_MODULUS, limit // self.n))
        return min(_MODULUS, limit + 1)

    def pattern(self, rank: int, count: int, offset: int = 0) -> torch.Tensor:
        """The check value of elements offset..offset+count of rank's buffer."""
        idx = torch.arange(offset, offset + count, device=self.device, dtype=torch.int64)
        if self.reduce_op == "prod":
            # One rank doubles each element, so the product is 1 or 2: never overflows.
            return (1 + (idx % (self.n + 1) == rank).to(torch.int64)).to(self.dtype)
        return ((idx * 13 + rank * 101) % self.modulus).to(self.dtype)

    def make(self, rank: int, count: int, offset: int = 0) -> torch.Tensor:
        if self.zeros:
            return torch.zeros(count, dtype=self.dtype, device=self.device)
        return self.pattern(rank, count, offset)

    def reduced(self, n: int, count: int, offset: int = 0) -> torch.Tensor:
        """What reducing every rank's pattern gives, built one rank at a time to bound memory."""
        op = self.reduce_op or "sum"
        acc = self.pattern(0, count, offset)
        if op == "avg":
            acc = acc.to(torch.float64)
        for r in range(1, n):
            x = self.pattern(r, count, offset).to(acc.dtype)
            if op in ("sum", "avg"):
                acc += x
            elif op == "prod":
                acc *= x
            elif op == "max":
                torch.maximum(acc, x, out=acc)
            else:
                torch.minimum(acc, x, out=acc)
        return acc / n if op == "avg" else acc

    def mismatches(self, got: torch.Tensor, want: torch.Tensor) -> int:
        if self.reduce_op != "avg":
            return int((got != want).sum().item())
        # Backends divide by n in their own order (NCCL pre-scales by 1/n): allow rounding.
        exact = want.to(torch.float64)
        tol = exact.abs() * 4 * _eps(self.dtype) + (0.0 if self.dtype.is_floating_point else 1.0)
        close = (got.to(torch.float64) - exact).abs() <= tol  # NaN compares False: counted wrong
        return int((~close).sum().item())


def _eps(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps if dtype.is_floating_point else 0.0
