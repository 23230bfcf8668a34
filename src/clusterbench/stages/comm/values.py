"""Buffer contents: zeros while timing, exact rank- and index-dependent values for the check
(docs/methodology.md §1, Correctness).

Reductions: element i gets a non-zero value from the 1 + (i mod K) consecutive ranks starting
at rank i mod n (K = min(n, 8)), and nothing from the others. Every rank is checked on its own
share of the elements at any world size, results vary from element to element, and the exact
sum stays at most K x top, within what the dtype holds exactly (bfloat16: integers up to 256;
int8: 127). Data movement uses the values 0..min(250, E - 1), offset per rank. Every rank's values
repeat after a period of elements (a few hundred at small world sizes), so a tensor here is one
period computed and then copied over itself, at the speed of a memory copy; where the period is
longer than CHUNK elements, it is computed in chunks of CHUNK. Either way the check needs a
bounded scratch, not int64 copies of the whole buffer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from clusterbench.stages.comm import options
from clusterbench.stages.comm.sizes import CHUNK

DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in options.DTYPES}

# The largest integer each dtype holds exactly.
_EXACT = {
    torch.float16: 2048, torch.bfloat16: 256, torch.float32: 2**24, torch.float64: 2**53,
    torch.int8: 127, torch.uint8: 255, torch.int32: 2**31 - 1, torch.int64: 2**63 - 1,
}
_MODULUS = 251  # prime, so chunk offsets and rank strides do not line up
WINDOW = 8  # ranks contributing to each element of a reduction

Expect = Callable[[int, int], torch.Tensor]  # elements start..stop of what a buffer must hold


def dtype_named(name: str) -> torch.dtype:
    return DTYPES[options.DTYPE_ALIASES.get(name, name)]


@dataclass(frozen=True)
class Values:
    dtype: torch.dtype
    device: torch.device
    reduce_op: str | None  # the reduction the values must survive exactly; None for data movement
    n: int
    zeros: bool  # timing buffers: zeros keep repeated in-place reductions free of overflow

    @property
    def window(self) -> int:
        return min(self.n, WINDOW)

    @property
    def rounded_avg(self) -> bool:
        """A float avg over a world size that is not a power of two: scaling by 1/n rounds."""
        return self.reduce_op == "avg" and self.dtype.is_floating_point and self.n & (self.n - 1) != 0

    @property
    def top(self) -> int:
        """The largest check value: a window of them must still sum exactly, and for a rounded avg a
        missing contribution of 1 (1/n of the mean) must stay above the rounding avg_tolerance allows:
        K x top x (K + 2) x eps / 2 < 1, kept with a margin of two."""
        if self.reduce_op not in ("sum", "avg"):
            return min(_MODULUS - 1, _EXACT[self.dtype] - 1)
        top = min(_MODULUS - 1, _EXACT[self.dtype] // self.window)
        if self.rounded_avg:
            k = self.window
            top = min(top, int(1 / (k * (k + 2) * torch.finfo(self.dtype).eps)))
        return max(1, top)

    @property
    def period(self) -> int:
        """Elements after which every rank's values, and so every expected value, repeat: the
        patterns depend on an element's index only through i mod (top + 1), mod (n + 1) for prod,
        and mod n, K and top for the other reductions."""
        if self.reduce_op is None:
            return self.top + 1
        if self.reduce_op == "prod":
            return self.n + 1
        return math.lcm(self.n, self.window, self.top)

    def _index(self, start: int, stop: int) -> torch.Tensor:
        return torch.arange(start, stop, device=self.device, dtype=torch.int64)

    def _raw(self, rank: int, idx: torch.Tensor) -> torch.Tensor:
        """Rank's value at the elements `idx` (int64)."""
        if self.reduce_op is None:
            return (idx * 13 + rank * 101) % (self.top + 1)
        if self.reduce_op == "prod":
            # One rank doubles each element, so the product is 1 or 2 and never overflows.
            return 1 + (idx % (self.n + 1) == rank).to(torch.int64)
        active = (rank - idx) % self.n < self._span(idx)
        value = self._value(idx, rank)
        idle = self.top + 1 if self.reduce_op == "min" else 0  # never the min, never adds to a sum or max
        return torch.where(active, value, torch.full_like(value, idle))

    def pattern(self, rank: int, count: int, offset: int = 0) -> torch.Tensor:
        """The check values of elements offset..offset+count of rank's buffer."""
        return self._built(count, offset, lambda idx: self._raw(rank, idx))

    def make(self, rank: int, count: int, offset: int = 0) -> torch.Tensor:
        if self.zeros:
            return torch.zeros(count, dtype=self.dtype, device=self.device)
        return self.pattern(rank, count, offset)

    def reduced(self, count: int, offset: int = 0) -> torch.Tensor:
        """What reducing every rank's pattern gives at elements offset..offset+count."""
        return self._built(count, offset, self._reduced, torch.float64 if self.reduce_op == "avg" else self.dtype)

    def _reduced(self, idx: torch.Tensor) -> torch.Tensor:
        op = self.reduce_op or "sum"
        if op == "prod":
            return 1 + (idx % (self.n + 1) < self.n).to(torch.int64)
        # Only the window's ranks give anything, so only they are combined: O(K), not O(n), per element.
        combine = {"max": torch.maximum, "min": torch.minimum}.get(op, torch.add)
        span = self._span(idx)
        acc = self._raw_window(idx, 0)
        for j in range(1, self.window):
            value = self._raw_window(idx, j)
            acc = torch.where(j < span, combine(acc, value), acc)
        if op != "avg":
            return acc
        # Integers: the backend divides the exact sum, truncating (the sum is never negative).
        return acc.to(torch.float64) / self.n if self.dtype.is_floating_point else acc // self.n

    def _span(self, idx: torch.Tensor) -> torch.Tensor:
        """How many ranks give element i a value: 1 + i mod K, so results differ between elements."""
        return 1 + idx % self.window

    def _raw_window(self, idx: torch.Tensor, j: int) -> torch.Tensor:
        """The value of the j-th rank of each element's window: rank (i + j) mod n."""
        return self._value(idx, (idx + j) % self.n)

    def _value(self, idx: torch.Tensor, rank: int | torch.Tensor) -> torch.Tensor:
        """What rank gives element i of a reduction when i's window holds it."""
        return 1 + (idx * 13 + rank * 101) % self.top

    @staticmethod
    def _chunks(count: int) -> Iterator[tuple[int, int]]:
        for a in range(0, count, CHUNK):
            yield a, min(count, a + CHUNK)

    def _built(self, count: int, offset: int, values: Callable[[torch.Tensor], torch.Tensor],
               dtype: torch.dtype | None = None) -> torch.Tensor:
        """Elements offset..offset+count of values(index): one period, then copies of what is filled
        (a whole number of periods, doubling each time), or chunk by chunk where the period is long."""
        out = torch.empty(count, dtype=dtype or self.dtype, device=self.device)
        period = self.period
        if period > CHUNK or period >= count:
            for a, b in self._chunks(count):
                out[a:b] = values(self._index(offset + a, offset + b))
            return out
        out[:period] = values(self._index(offset, offset + period))
        filled = period
        while filled < count:
            step = min(filled, count - filled)
            out[filled:filled + step] = out[:step]
            filled += step
        return out

    def mismatches(self, got: torch.Tensor, want: Expect) -> int:
        """Wrong elements of `got`, compared chunk by chunk against want(start, stop)."""
        return sum(self._wrong(got[a:b], want(a, b)) for a, b in self._chunks(got.numel()))

    def _wrong(self, got: torch.Tensor, want: torch.Tensor) -> int:
        if not self.rounded_avg:
            return int((got != want).sum().item())
        exact = want.to(torch.float64)
        close = (got.to(torch.float64) - exact).abs() <= self.avg_tolerance(exact)  # NaN is never close
        return int((~close).sum().item())

    def avg_tolerance(self, exact: torch.Tensor) -> torch.Tensor:
        """How far a correct float avg over n (not a power of two) may be from the exact mean: each
        of the window's terms is scaled by 1/n (itself rounded) and the terms are added in the
        backend's order; every step rounds by at most half an ulp of a value no larger than the
        mean, so (window + 2) half-ulps of the mean bound the error in any order. With n a power of
        two the scaling is exact and so are the sums: no tolerance at all."""
        return exact.abs() * (self.window + 2) * torch.finfo(self.dtype).eps / 2
