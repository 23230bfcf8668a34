"""A folder of NCCL logs read as one job's: which logs belong together, and refusing a mix.

NCCL prints a communicator's commId (a hash of its unique id, the same on every rank) when it sets
one up: since 2.12 at "Init COMPLETE", since 2.19 already at "Init START", so even a job that failed
after that names it. Logs naming one commId, directly or through a chain of logs, are one job. A
log naming none cannot be tied to any other: in a folder of loose logs it is a job of its own; in a
run folder's nccl/ it is that run's (the run claimed the folder empty), so it joins the run. A file
with no NCCL line in it is no job at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from clusterbench.errors import UsageError
from clusterbench.inputs import files
from clusterbench.nccl.log import Source, read_files
from clusterbench.nccl.records import NcclFacts

LOGS = "*.log"  # NCCL_DEBUG_FILE=dir/nccl.%h.%p.log, as the harness names them


def jobs(sources: Sequence[Source]) -> list[list[Source]]:
    """The sources that said something NCCL's, grouped by job, in the order of their first source."""
    said = [s for s in sources if s.nccl]
    group = list(range(len(said)))  # union-find: each source's way to its group's first source

    def first(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i

    owner: dict[str, int] = {}  # commId -> the first source that named it
    for i, source in enumerate(said):
        for comm_id in source.comm_ids:
            a, b = first(i), first(owner.setdefault(comm_id, i))
            group[max(a, b)] = min(a, b)
    found: dict[int, list[Source]] = {}
    for i, source in enumerate(said):
        found.setdefault(first(i), []).append(source)
    return list(found.values())


def one_job(sources: Sequence[Source], where: Path, own: bool) -> None:
    """Nothing when the sources are one job's logs (`own`: a run folder's, where a log naming no
    communicator is the run's); else a one-line UsageError saying how many jobs they hold, and how
    to diagnose one: a picture of unrelated jobs merged would describe none of them."""
    found = jobs([s for s in sources if s.comm_ids] if own else sources)
    if len(found) < 2:
        return
    unnamed = sum(1 for job in found if not any(s.comm_ids for s in job))
    raise UsageError(f"{where}: the NCCL logs of {len(found)} jobs, not one (no communicator in common"
                     + (f"; {unnamed} name none" if unnamed else "")
                     + "): diagnose one job's logs at a time, in a folder of their own or concatenated into one file")


def read_folder(folder: Path, own: bool) -> tuple[NcclFacts | None, list[Path]]:
    """The facts in the regular *.log files of `folder`, None when it has none, and the entries so
    named that are not regular files (folders, FIFOs, broken links), left out. The logs must be one
    job's (`one_job`); one that cannot be read is a one-line UsageError."""
    logs, skipped = files.regular_files(folder, LOGS)
    if not logs:
        return None, skipped
    facts, sources = read_files(logs)
    if not any(s.nccl for s in sources):
        raise UsageError(f"{folder}: no NCCL INFO lines in its {len(logs)} {LOGS} file(s) "
                         "(were they written with NCCL_DEBUG=INFO?)")
    one_job(sources, folder, own)
    return facts, skipped
