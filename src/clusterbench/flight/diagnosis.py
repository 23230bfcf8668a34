"""`clusterbench diagnose DUMP_DIR`: a folder of Flight Recorder dumps, read and judged in lines to print.

The lines say what was read (ranks, format, backend, hosts or that they are not recorded, what was
left out), then per process group what analysis.py found: the rank that never entered the collective
the others wait in, ranks that disagree on a collective, point-to-point ops without their partner,
or that every rank completed what it recorded. Exit 1 when a culprit or a disagreement is found, 0 when
the dumps were judged and none is; nothing to judge (no dump records a collective, or the folder mixes
the dumps of different jobs, which together describe no job) is a UsageError, exit 2, never a verdict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clusterbench.errors import EXIT_FAILED, EXIT_OK, UsageError
from clusterbench.flight import analysis, dumps, jobs
from clusterbench.units import ranks_text


def is_dump_folder(path: Path) -> bool:
    """True for a folder (not a run folder) holding a file named like a dump whose first bytes are a
    pickle's or a JSON object's: what `diagnose` reads as Flight Recorder dumps rather than NCCL logs."""
    path = Path(path)
    if not path.is_dir() or (path / "run.json").exists():
        return False
    try:
        named, _ = dumps.candidates(path)
    except UsageError:  # an unlistable folder is not ours to judge here; diagnose names it
        return False
    return any(dumps.looks_like_dump(p) for p in named)


def _hosts(folder: dumps.Folder) -> str:
    named = sorted({d.host for d in folder.dumps if d.host})
    if not named:
        return "hosts not recorded"
    missing = sum(1 for d in folder.dumps if not d.host)
    return (f"host{'s' if len(named) > 1 else ''} {', '.join(named[:4])}" + (" ..." if len(named) > 4 else "")
            + (f"; not recorded for {missing} rank(s)" if missing else ""))


def _backends(folder: dumps.Folder) -> str:
    found = sorted({e.backend for d in folder.dumps for e in d.entries})
    return ", ".join(found) if found else "no entries"


def _judgeable(folder: dumps.Folder, path: Path) -> None:
    """Dumps that describe one job and hold something of it, else "nothing to judge" saying what is missing or
    mixed: no verdict, healthy or not, stands on them."""
    if not any(d.entries for d in folder.dumps):
        raise UsageError(f"nothing to judge: none of the {len(folder.dumps)} dump(s) in {path} records a "
                         "collective (was TORCH_FR_BUFFER_SIZE set before the process group was made?)")
    why = jobs.mixed(folder.dumps)
    if why:
        raise UsageError(f"nothing to judge: {path} mixes the dumps of different jobs ({why}); put one job's "
                         "dumps in a folder of their own")


def _missing(ranks: list[int]) -> list[int]:
    """The ranks below the highest that left no dump."""
    present = set(ranks)
    return [r for r in range(max(ranks) + 1) if r not in present]


def diagnose(path: Path) -> tuple[list[str], int]:
    """The lines to print for a folder of dumps, and the exit code; a one-line UsageError for bad input,
    or for dumps that leave nothing to judge."""
    folder = dumps.read_folder(Path(path))
    _judgeable(folder, Path(path))
    ranks = [d.rank for d in folder.dumps]
    head = (f"Flight Recorder dumps of {ranks_text(ranks)} in {path} (format {folder.dumps[0].version}; "
            f"{_backends(folder)}; {_hosts(folder)})")
    lines = [head]
    missing = _missing(ranks)
    if missing:
        lines.append(f"  no dump from {ranks_text(missing)}")
    lines += [f"  note: {n}" for n in folder.notes]
    found = analysis.analyse(folder.dumps)
    for f in found:
        lines.append(f"  {f.kind.upper():<8} {f.text}")
    failed = [f for f in found if f.fails]
    if failed:
        lines.append(f"verdict: FAIL: {len(failed)} finding(s) above name the ranks that stopped the others")
    elif any(f.kind == "hang" for f in found):
        lines.append("verdict: a collective is in flight, but no rank is missing from it and none disagrees")
    elif found:
        lines.append("verdict: healthy: every collective recorded completed on every rank")
    else:  # point-to-point ops alone, none without its partner
        lines.append("verdict: no collective recorded; every point-to-point op recorded has its partner")
    return lines, EXIT_FAILED if failed else EXIT_OK


def culprit(raw: dict[int, bytes]) -> str | None:
    """What the first finding that fails says (the rank that held the others up, ranks that disagree),
    from dumps as bytes by rank (our own ranks leave theirs on the rendezvous board); None when the
    dumps name nobody. A damaged dump is a one-line UsageError."""
    pool: dict[Any, Any] = {}  # one for all ranks: their equal shapes one object, compared at once
    found = analysis.analyse([dumps.parse(data, Path(f"rank {rank}'s dump"), rank, pool=pool)
                              for rank, data in sorted(raw.items())])
    return next((f.text for f in found if f.fails), None)
