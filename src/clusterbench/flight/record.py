"""Our own ranks' Flight Recorder: switched on before the process group forms, dumped when a rank hangs.

Torch reads the buffer size once, when the recorder is first used, so the variable must be in the
rank's environment before init_process_group. Its name changed: TORCH_NCCL_TRACE_BUFFER_SIZE is read
by every torch clusterbench supports (2.4 on) and is deprecated, with a warning per rank, where
TORCH_FR_BUFFER_SIZE replaced it; the new name is set where that is verified (torch 2.13, whose
recorder is on by default with 2,000 entries), the old one below; the dump folder's variables likewise
(TORCH_FR_DUMP_TEMP_FILE, formerly TORCH_NCCL_DEBUG_INFO_TEMP_FILE). The buffer is small: a comm
sweep enqueues thousands of collectives, but a hang needs only the last few per group, and each
record's cost (a Python stack captured per collective) is paid whatever the size; bench/bench_flight.py
measures it. A variable the user set, under either name, is left as they set it. Given a folder,
torch's own dump on a watchdog timeout (NCCL) is pointed there too, named as torch names it.

`dump` writes this rank's record as torch would (the same pickle, the same name), plus the two facts
torch's format leaves out, `rank` and `hostname`, so that `clusterbench diagnose` can name the host;
torch's own analyser ignores keys it does not know. The file is written beside its final name and
renamed, so a reader sees a whole dump or none.
"""

from __future__ import annotations

import os
import pickle
import re
import socket
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from clusterbench.errors import RunFailed
from clusterbench.results import documents

# Entries kept per rank: the last collectives of every group with room to spare for a sweep's steps.
DEFAULT_BUFFER = 256
BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")  # (new, old)
DUMP_PREFIX_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
NEW_NAMES_SINCE = (2, 13)
PREFIX = "nccl_trace_rank_"  # torch's default file name, the rank appended


def _torch_version() -> tuple[int, int]:
    """The installed torch's (major, minor), read from its package metadata: torch itself is not loaded."""
    try:
        found = re.match(r"(\d+)\.(\d+)", metadata.version("torch"))
    except metadata.PackageNotFoundError:
        return (0, 0)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def environment(folder: Path | None = None, buffer: int = DEFAULT_BUFFER,
                environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables to set in a rank's environment before its process group forms (those the user
    has not set already): the buffer size, and with `folder` where torch's own timeout dumps go."""
    environ = os.environ if environ is None else environ
    wanted = [(BUFFER_VARS, str(buffer))] + ([(DUMP_PREFIX_VARS, str(Path(folder) / PREFIX))] if folder else [])
    which = 0 if _torch_version() >= NEW_NAMES_SINCE else 1
    return {names[which]: value for names, value in wanted if not any(name in environ for name in names)}


def path_of(rank: int, folder: Path) -> Path:
    return Path(folder) / f"{PREFIX}{rank}"


def _trace() -> bytes:
    import torch  # loaded here: reading dumps needs no torch

    c10d = torch._C._distributed_c10d
    # _dump_fr_trace covers every backend (torch >= 2.7); older torches dump NCCL's recorder alone.
    for name in ("_dump_fr_trace", "_dump_nccl_trace"):
        dumper = getattr(c10d, name, None)
        if dumper is not None:
            # Without the stack traces: symbolising them took 2.5 s for 256 entries (torch 2.13, a 2-core
            # CPU), the entries alone 4 ms, and a rank that asks for the record is on its way out.
            return dumper(includeCollectives=True, includeStackTraces=False, onlyActive=False)
    raise RunFailed(f"torch {torch.__version__} cannot dump its Flight Recorder (no _dump_fr_trace)")


def trace(rank: int) -> bytes:
    """This rank's Flight Recorder as torch pickles it, with its rank and host added."""
    doc = pickle.loads(_trace())  # torch's own bytes, made in this process: trusted
    doc["rank"], doc["hostname"] = rank, socket.gethostname()
    return pickle.dumps(doc, protocol=2)  # torch writes protocol 2


def write(rank: int, data: bytes, folder: Path) -> Path:
    """A rank's dump (`trace`'s bytes) written atomically to folder/nccl_trace_rank_<rank>, with the run
    folder's file mode; its path."""
    target = path_of(rank, folder)
    target.parent.mkdir(parents=True, exist_ok=True)
    documents.atomic_write(target, data)
    return target


def dump(rank: int, folder: Path) -> Path:
    """This rank's Flight Recorder, written atomically to folder/nccl_trace_rank_<rank>; its path."""
    return write(rank, trace(rank), folder)
