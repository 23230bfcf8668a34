"""The soak's memory test: a region of device memory allocated once, written with a pattern and read back span by
span, every word (8 bytes) that reads back other than written counted with its byte offset in the region, what
was written and what was read.

One pass covers the whole region with one pattern, over as many windows as it takes; the passes take the
patterns in turn: all zeros, all ones, the checkerboards 0xAA.. and 0x55.., each word's own byte offset as its
value (a write that lands at another address shows), and a one walking across the word's 64 bits, a bit further
each round of patterns. A span is written whole before it is read back, so that past the caches the reads come
from the memory itself. GB/s counts the bytes written and read (the convention of STREAM's copy)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from clusterbench.errors import UsageError
from clusterbench.hw.host import meminfo_bytes
from clusterbench.units import human_bytes

WORD = 8
PATTERNS = ("zeros", "ones", "0xaa checkerboard", "0x55 checkerboard", "own offset", "walking one")
KEPT = 64  # wrong words a rank sends per window: their count is exact, the first ones are examples
CHUNK_BYTES = {"cpu": 16 << 20}  # what one write or read call covers, bounding its scratch
GPU_CHUNK_BYTES = 256 << 20
CPU_MAX_BYTES = 256 << 20  # the host's memory is the job's, and its other ranks': test a bounded share
CPU_SHARE = 8  # at most an eighth of the memory available, shared among the host's ranks
GPU_SHARE = 0.8  # of the device's free memory, less what the soak's other work holds
_MASK = 2**64 - 1


def _signed(value: int) -> int:
    """A 64-bit pattern as the int64 torch holds it."""
    return value - 2**64 if value >= 2**63 else value


def chunk_bytes(device: torch.device) -> int:
    return CHUNK_BYTES.get(device.type, GPU_CHUNK_BYTES)


def scratch_bytes(device: torch.device) -> int:
    """What the test holds beside its region: the offsets, an expected chunk, and the comparison's mask."""
    return 2 * chunk_bytes(device) + chunk_bytes(device) // WORD


def region_bytes(device: torch.device, asked: int | None, local_ranks: int, reserved: int) -> int:
    """The region to test: `asked` where it fits beside `reserved` bytes of the soak's other work, else a
    UsageError; None: a GPU's share of its free memory, a CPU's bounded share of the host's."""
    if device.type == "cpu":
        available = meminfo_bytes(key="MemAvailable")
        if asked is not None:
            return asked  # checked against the host's memory before the ranks started
        return min(CPU_MAX_BYTES, (available or CPU_MAX_BYTES * CPU_SHARE) // CPU_SHARE // local_ranks)
    free = torch.cuda.mem_get_info(device)[0]
    room = free - reserved - scratch_bytes(device)
    if asked is not None and asked > room:
        raise UsageError(f"--memory-bytes {human_bytes(asked)}: {device} has {human_bytes(free)} free, "
                         f"and the soak's matmul and collective need {human_bytes(reserved)} of it")
    return asked if asked is not None else max(int(GPU_SHARE * free) - reserved - scratch_bytes(device), WORD)


@dataclass(frozen=True)
class MemoryWindow:
    """The test over one window's share of time on one device."""

    gbps: float
    wrong: int  # every wrong word
    words: list[tuple[int, int, int]] = field(default_factory=list)  # (byte offset, wrote, read): the first KEPT,
    # the words as int64 holds them


class MemoryTest:
    def __init__(self, device: torch.device, nbytes: int) -> None:
        self.device = device
        words = nbytes // WORD
        try:
            self.region = torch.empty(words, dtype=torch.int64, device=device)
        except (torch.OutOfMemoryError, RuntimeError) as e:
            raise UsageError(f"the memory test's {human_bytes(nbytes)} do not fit on {device} ({e}); give a smaller "
                             "--memory-bytes") from None
        self.region.zero_()  # every page mapped now: a first touch in a window would read as slow memory
        self.chunk = min(words, chunk_bytes(device) // WORD)
        self.offsets = torch.arange(self.chunk, dtype=torch.int64, device=device) * WORD
        self.passes = 0  # whole passes over the region so far
        self.cursor = 0  # the next word of this pass
        self._chunk_s: float | None = None  # what writing and reading back one chunk took lately

    @property
    def nbytes(self) -> int:
        return self.region.numel() * WORD

    def pattern(self) -> str:
        return PATTERNS[self.passes % len(PATTERNS)]

    def _value(self) -> int | None:
        """This pass's word, as int64; None: each word's own offset."""
        bit = (self.passes // len(PATTERNS)) % 64
        return (0, _MASK, 0xAAAAAAAAAAAAAAAA, 0x5555555555555555, None, 1 << bit)[self.passes % len(PATTERNS)]

    def run(self, seconds: float, flip: bool = False) -> MemoryWindow:
        """Spans written and read back until `seconds` pass. `flip` (a test's fault, faults.flip_second): one
        word of the first span is flipped between its write and its read."""
        moved, wrong, kept = 0, 0, []
        start = time.perf_counter()
        while time.perf_counter() - start < seconds or moved == 0:
            left = seconds - (time.perf_counter() - start)
            chunks = 1 if self._chunk_s is None else max(1, int(left / self._chunk_s))
            began = time.perf_counter()
            span = self._span(chunks)
            value = self._value()
            for offset, size in span:
                self._write(offset, size, value)
            if flip:
                word = span[0][0] + span[0][1] // 2
                self.region.narrow(0, word, 1).bitwise_xor_(1)
                flip = False
            for offset, size in span:
                count, words = self._read(offset, size, value, KEPT - len(kept))
                wrong += count
                kept += words
            self._chunk_s = (time.perf_counter() - began) / len(span)
            moved += 2 * WORD * sum(size for _, size in span)
            self._advance(span)
        return MemoryWindow(moved / (time.perf_counter() - start) / 1e9, wrong, kept)

    def _span(self, chunks: int) -> list[tuple[int, int]]:
        """Up to `chunks` chunks from the cursor, as (first word, words), within this pass."""
        span, at = [], self.cursor
        total = self.region.numel()
        while len(span) < chunks and at < total:
            size = min(self.chunk, total - at)
            span.append((at, size))
            at += size
        return span

    def _advance(self, span: list[tuple[int, int]]) -> None:
        last, size = span[-1]
        self.cursor = last + size
        if self.cursor >= self.region.numel():
            self.passes, self.cursor = self.passes + 1, 0

    def _expected(self, offset: int, size: int) -> torch.Tensor:
        return self.offsets[:size] + offset * WORD

    def _write(self, offset: int, size: int, value: int | None) -> None:
        view = self.region.narrow(0, offset, size)
        if value is None:
            torch.add(self.offsets[:size], offset * WORD, out=view)
        else:
            view.fill_(_signed(value))

    def _read(self, offset: int, size: int, value: int | None, keep: int) -> tuple[int, list[tuple[int, int, int]]]:
        view = self.region.narrow(0, offset, size)
        expected = self._expected(offset, size) if value is None else None
        bad = view != (expected if expected is not None else _signed(value))
        count = int(torch.count_nonzero(bad))
        if not count or keep <= 0:
            return count, []
        at = torch.nonzero(bad).flatten()[:keep]
        read = view[at].tolist()
        wrote = expected[at].tolist() if expected is not None else [value] * len(read)
        return count, [((offset + i) * WORD, w, r) for i, w, r in zip(at.tolist(), wrote, read)]
