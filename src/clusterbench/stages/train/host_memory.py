"""Host memory a CPU rank frees goes back to the system.

glibc serves a freed block's size from its heap afterwards (its mmap threshold rises to the largest
block freed, up to 32 MiB), so a training step's gradients, gathered FSDP groups and optimizer
temporaries stay in the process once freed and pile up across the step. The process's peak RSS then
says more about the allocator than about the training state: measured on 125m, 4 gloo ranks, FSDP
peaked at 2.7 GiB per rank this way and at 1.3 GiB with the threshold held at 1 MiB (DDP: 3.1 GiB
either way). Blocks of 1 MiB and more are then mapped and unmapped with each tensor, which costs
page faults: CPU tgs fell to 0.61-0.80 of what it was (bench/bench_memory.py). So only FSDP ranks,
whose user asked to hold less, return their freed blocks (on a GPU too, where the set-up's one
parameter at a time is host memory and a step allocates little there); DDP saves nothing by it and
keeps its speed.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
THRESHOLD_BYTES = 1 << 20


def return_freed_blocks() -> bool:
    """Hold glibc's mmap threshold at 1 MiB in this process; False where the C library is not glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has mallopt's M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES))
