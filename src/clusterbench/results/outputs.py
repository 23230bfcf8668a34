"""The files a command writes at paths the user names, checked together before anything is measured.

Each output option declares what it writes. An existing file there is replaced only where it is a file
of that kind clusterbench made (an exclude list, a Prometheus textfile: rewritten by every run; a loss
reference, made again) or the user adds --overwrite; a run's own files (run.json, its tables, its report)
are never replaced by another kind of file, and no output may be one of the command's own inputs (its
baseline, topology, rules, reference, results store or run folders), --overwrite or not. Every output's folder is proved
writable first, so a fleet of thousands of nodes is never measured for a list that cannot be written.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from clusterbench.errors import UsageError
from clusterbench.results.folder import result_files

SNIFF_BYTES = 4 * 1024**2  # an exclude list of 10,000 nodes is about 200 KB; a larger file is not one of ours
_NODE_LINE = re.compile(rb"[A-Za-z0-9][A-Za-z0-9._-]*")  # a host name, as a node is named


def _exclude_list(head: bytes) -> bool:
    return all(_NODE_LINE.fullmatch(line) for line in head.splitlines())


def _textfile(head: bytes) -> bool:
    """Prometheus text whose every series is clusterbench's (prometheus.py names them all clusterbench_)."""
    starts = (b"# HELP clusterbench_", b"# TYPE clusterbench_", b"clusterbench_")
    return all(line.startswith(starts) for line in head.splitlines())


def _reference(head: bytes) -> bool:
    """A loss reference train --save-reference wrote: its kind is among its first lines."""
    return re.search(rb'^\s*\{\s*"kind":\s*"clusterbench-loss-reference"', head[:256]) is not None


@dataclass(frozen=True)
class Output:
    flag: str
    what: str
    ours: Callable[[bytes], bool] | None = None  # an earlier one of ours, replaced without --overwrite


# By argparse dest: every option that names a file the command writes.
OUTPUTS = {
    "exclude_out": Output("--exclude-out", "an exclude list", _exclude_list),
    "metrics_textfile": Output("--metrics-textfile", "a Prometheus textfile", _textfile),
    "report": Output("--report", "a report page"),
    "output": Output("--output", "a baseline"),
    "plot": Output("--plot", "a plot"),
    "save_reference": Output("--save-reference", "a loss reference", _reference),
}
# Options that name what a command reads, beside the positional runs: never written over.
_INPUTS = ("baseline", "topology", "rules", "node_rules", "expected", "reference", "runs", "run_dir", "run_a", "run_b", "run",
           "target")


def _paths(value: object) -> Iterator[Path]:
    """The paths an option's value names, as the command opens them (the shell has expanded any ~)."""
    for item in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(item, (str, Path)) and str(item):
            yield Path(item)


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _inside_run(path: Path) -> bool:
    """Whether `path` is one of the files a run keeps in its folder."""
    folder = path.parent
    return (folder / "run.json").exists() and any(_same(path, f) for f in result_files(folder))


def _read_head(path: Path) -> bytes | None:
    try:
        with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK)) as f:
            return f.read(SNIFF_BYTES + 1)
    except OSError:
        return None


def _writable_here(path: Path, label: str) -> None:
    """A file can be made beside `path`: in its folder, or where the folders up to it would be made."""
    folder = path.absolute().parent
    while not folder.exists():
        if folder.is_symlink():
            raise UsageError(f"{label} {path}: {folder} is a broken symbolic link")
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"{label} {path}: {folder} is not a folder")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-test.")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UsageError(f"{label} {path}: cannot write in {folder} ({e.strerror or e})") from None


def check_one(path: Path, out: Output, overwrite: bool) -> Path:
    """`path` as a file `out` may write, else a one-line UsageError saying what is there."""
    label = out.flag
    try:
        exists = path.exists() or path.is_symlink()
        if path.is_dir():
            raise UsageError(f"{label} {path} is a folder: give the name of a file to write")
    except OSError as e:  # a name too long for the file system, a path through a file
        raise UsageError(f"{label} {path}: cannot be written ({e.strerror or e})") from None
    if exists:
        if _inside_run(path):
            raise UsageError(f"{label} {path} is part of the run in {path.parent}: write {out.what} elsewhere")
        if not overwrite:
            if out.ours is None:
                raise UsageError(f"{label} {path} already exists: write elsewhere, or add --overwrite to replace it")
            head = _read_head(path)
            if head is None or len(head) > SNIFF_BYTES or not out.ours(head):
                raise UsageError(f"{label} {path} already exists and is not {out.what} clusterbench wrote: "
                                 "write elsewhere, or add --overwrite to replace it")
    _writable_here(path, label)
    return path


def _store_file(args: argparse.Namespace, uses_store: bool) -> Path | None:
    if not (uses_store or hasattr(args, "store")):
        return None
    from clusterbench.store import where as store_where  # no database library: only the path is wanted

    where = store_where.resolve(getattr(args, "store", None))
    return where.path if where is not None else None


def check(args: argparse.Namespace, uses_store: bool) -> None:
    """Every output option of the command line checked, against each other and against every input (and the
    results store, where the command records in one: `uses_store`)."""
    overwrite = bool(getattr(args, "overwrite", False))
    outputs = [(Path(value), out) for dest, out in OUTPUTS.items()
               if (value := getattr(args, dest, None)) is not None]
    inputs = [p for name in _INPUTS for p in _paths(getattr(args, name, None))]
    store = _store_file(args, uses_store)
    if store is not None:
        inputs.append(store)
    run_dir = getattr(args, "out", None)
    for i, (path, out) in enumerate(outputs):
        check_one(path, out, overwrite)
        for earlier, other in outputs[:i]:
            if path.absolute() == earlier.absolute() or _same(path, earlier):
                raise UsageError(f"{out.flag} {path}: {other.flag} writes there too; give each its own file")
        for source in inputs:
            if path.absolute() == source.absolute() or _same(path, source):
                raise UsageError(f"{out.flag} {path} is one of this command's inputs: write {out.what} elsewhere")
    if run_dir is not None:
        theirs = [f.absolute() for f in result_files(Path(run_dir))]
        for path, out in outputs:
            if path.absolute() in theirs:
                raise UsageError(f"{out.flag} {path} is one of the files of this run's folder: write {out.what} "
                                 "elsewhere")
        for source in inputs:
            if _same(Path(run_dir), source) or (source.name == "run.json" and _same(Path(run_dir), source.parent)):
                raise UsageError(f"--out {run_dir} is one of this command's inputs: give the run its own folder")
