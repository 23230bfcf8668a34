"""Whether this process can still fork its local ranks cleanly (launch._context): a fork copies only
the forking thread, so a lock another thread held stays held in the copy for good. torch's import
starts one thread, OpenBLAS's server, which re-arms itself across fork; a pool started after it
(OpenMP's for a parallel op, the tokenizer's) would leave the ranks to hang on their first use of it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch


def _threads() -> int | None:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


THREADS_AT_IMPORT = _threads()  # after torch's import, before any work


def pools_unstarted() -> bool:
    """No thread has started in this process since torch was imported (where /proc tells)."""
    return THREADS_AT_IMPORT is not None and _threads() == THREADS_AT_IMPORT


@contextmanager
def without_thread_pools() -> Iterator[None]:
    """For work this process does before it starts its ranks (reading the training data): one thread
    for torch's ops and serial tokenizing, so that no pool starts. Each rank sets its own thread
    count when it joins (dist.py)."""
    threads, serial = torch.get_num_threads(), os.environ.get("TOKENIZERS_PARALLELISM")
    torch.set_num_threads(1)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        if serial is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = serial
