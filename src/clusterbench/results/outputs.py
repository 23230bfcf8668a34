"""The files a command writes at paths the user names, checked together before anything is measured.

Each output option declares what it writes, whatever form it is typed in (`--exclude-out`, run's
`--fleet.exclude-out` or `--fleet-args "--exclude-out ..."`: every option is known by its own name, the
stage's prefix aside). An existing file there is replaced only where it is provably a file of that kind
clusterbench made, or the user adds --overwrite: a regular file (never a FIFO, a device, a socket or a
symbolic link) whose content says so where the kind has a mark of its own (a loss reference's "kind", a
textfile's clusterbench_ series), or which carries the mark clusterbench leaves on every output it wrote:
an extended attribute (user.clusterbench.output) naming the kind and the SHA-256 of the bytes written. An
exclude list has no room for a mark of its own, since its readers (`srun --exclude=$(paste -sd, FILE)`,
Slurm's host files) take every line for a host; on a file system that keeps no extended attributes, or
once the file was edited, it is not provably ours, and --overwrite is asked for. A FIFO, a device or a
socket is refused even with --overwrite (replacing /dev/null would break the machine). A run's own
files (run.json, its tables, its report) are never replaced by another kind of file, and no output may
be one of the command's own inputs (every option naming a file or folder it reads, the results store it
records in, its run folders), --overwrite or not. Every output's folder is proved writable first, so a
fleet of thousands of nodes is never measured for a list that cannot be written.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterbench.errors import UsageError
from clusterbench.inputs import files

SNIFF_BYTES = 4 * 1024**2  # an exclude list of 10,000 nodes is about 200 KB; a larger file is not one of ours
MARK = "user.clusterbench.output"  # the extended attribute clusterbench leaves on what it wrote


def _textfile(head: bytes) -> bool:
    """Prometheus text whose every series is clusterbench's (publish/prometheus.py names them all clusterbench_)."""
    starts = (b"# HELP clusterbench_", b"# TYPE clusterbench_", b"clusterbench_")
    lines = head.splitlines()
    return any(line.startswith(b"clusterbench_") for line in lines) and all(line.startswith(starts) for line in lines)


def _reference(head: bytes) -> bool:
    """A loss reference train --save-reference wrote: its kind is among its first lines."""
    return re.search(rb'^\s*\{\s*"kind":\s*"clusterbench-loss-reference"', head[:256]) is not None


@dataclass(frozen=True)
class Output:
    flag: str
    what: str
    kind: str | None = None  # the mark's kind, where an earlier one of ours is replaced without --overwrite
    speaks: Callable[[bytes], bool] | None = None  # content that is a mark of its own


# By argparse dest (a stage's option under run without its prefix): every option that names a file the
# command writes. tests/test_hostile_outputs.py holds every option of every parser that names a file to it.
OUTPUTS = {
    "exclude_out": Output("--exclude-out", "an exclude list", "exclude-list"),
    "metrics_textfile": Output("--metrics-textfile", "a Prometheus textfile", "textfile", _textfile),
    "report": Output("--report", "a report page"),
    "output": Output("--output", "a baseline"),
    "plot": Output("--plot", "a plot"),
    "save_reference": Output("--save-reference", "a loss reference", "loss-reference", _reference),
}
# Options that name what a command reads where their value is text, not a Path (every Path that is no
# output is an input too): never written over.
INPUTS = ("baseline", "topology", "rules", "node_rules", "expected", "reference", "runs", "run_dir", "run_a",
          "run_b", "run", "target", "from_run", "data", "model_config", "model_path", "tokenizer")


@dataclass(frozen=True)
class Planned:
    """An output as it stood before the command: what tells afterwards whether the command wrote it."""

    path: Path
    out: Output
    before: tuple[int, int] | None  # (inode, mtime) of the file there, None where there was none


def _options(args: argparse.Namespace) -> Iterator[tuple[str, str, Any]]:
    """(name, prefix, value) of every option given: run's --STAGE.option as its stage's own option."""
    for dest, value in vars(args).items():
        prefix, _, name = dest.rpartition(".")
        if value is not None:
            yield name, prefix, value


def _flag(out: Output, prefix: str) -> str:
    return f"--{prefix}.{out.flag[2:]}" if prefix else out.flag


def _paths(value: object) -> Iterator[Path]:
    """The paths an option's value names, as the command opens them (the shell has expanded any ~)."""
    for item in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(item, (str, Path)) and str(item):
            yield Path(item)


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def _within(path: Path, folder: Path) -> bool:
    """Whether `folder` would have to be a folder for `path` to be made: one of its folders."""
    return folder.absolute() in path.absolute().parents


# The files a run keeps in a folder: RunFolder.files, from the sections this clusterbench declares.
RunFiles = Callable[[Path], list[Path]]


def _inside_run(path: Path, run_files: RunFiles) -> bool:
    """Whether `path` is one of the files a run keeps in its folder."""
    folder = path.parent
    return (folder / "run.json").exists() and any(_same(path, f) for f in run_files(folder))


def _read(path: Path) -> bytes | None:
    """The bytes of a regular file of at most SNIFF_BYTES, never following a link or waiting on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            data = f.read(SNIFF_BYTES + 1)
        except OSError:
            return None
    return data if len(data) <= SNIFF_BYTES else None


def _mark(kind: str, data: bytes) -> bytes:
    return f"{kind} sha256={hashlib.sha256(data).hexdigest()}".encode()


def _proved_ours(path: Path, out: Output) -> bool:
    """A regular file of `out`'s kind that clusterbench wrote: by its content's own mark, or by ours."""
    data = _read(path)
    if data is None or out.kind is None:
        return False
    if out.speaks is not None and out.speaks(data):
        return True
    try:
        return os.getxattr(path, MARK, follow_symlinks=False) == _mark(out.kind, data)
    except (OSError, AttributeError):  # no mark, or a system or file system that keeps none
        return False


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


def check_one(path: Path, out: Output, overwrite: bool, label: str | None = None,
              run_files: RunFiles | None = None) -> Planned:
    """`path` as a file `out` may write, else a one-line UsageError saying what is there (one of a run's files
    where `run_files` names them)."""
    label = label or out.flag
    try:
        st = os.lstat(path)
        folder = path.is_dir()
    except FileNotFoundError:
        st, folder = None, False
    except NotADirectoryError:  # a path through a file: said by _writable_here, naming the file
        st, folder = None, False
    except (OSError, ValueError) as e:  # a name too long for the file system
        raise UsageError(f"{label} {path}: cannot be written ({getattr(e, 'strerror', None) or e})") from None
    if folder:
        raise UsageError(f"{label} {path} is a folder: give the name of a file to write")
    if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        raise UsageError(f"{label} {path} is {files.kind(path)}, not a file: name a regular file to write "
                         f"{out.what} to")
    if st is not None:
        if run_files is not None and _inside_run(path, run_files):
            raise UsageError(f"{label} {path} is part of the run in {path.parent}: write {out.what} elsewhere")
        if not overwrite and out.kind is None:
            raise UsageError(f"{label} {path} already exists: write elsewhere, or add --overwrite to replace it")
        if not overwrite and not _proved_ours(path, out):
            raise UsageError(f"{label} {path} already exists and is not {out.what} clusterbench wrote (as far as "
                             "it can prove): write elsewhere, or add --overwrite to replace it")
    _writable_here(path, label)
    return Planned(path, out, None if st is None else (st.st_ino, st.st_mtime_ns))


def _store_file(args: argparse.Namespace, uses_store: bool) -> Path | None:
    if not (uses_store or hasattr(args, "store")):
        return None
    from clusterbench.store.where import resolve  # no database library: only the path is wanted

    where = resolve(getattr(args, "store", None))
    return where.path if where is not None else None


def _inputs(args: argparse.Namespace, uses_store: bool) -> list[Path]:
    found = []
    for name, _, value in _options(args):
        items = value if isinstance(value, (list, tuple)) else [value]
        if name in INPUTS or (name not in OUTPUTS and name != "out" and any(isinstance(v, Path) for v in items)):
            found += _paths(value)
    store = _store_file(args, uses_store)
    return found + ([store] if store is not None else [])


def check(args: argparse.Namespace, uses_store: bool, run_files: RunFiles) -> list[Planned]:
    """Every output option of the command line checked, against each other, against every input (and the
    results store, where the command records in one: `uses_store`) and against a run's files; what each output
    was before, for mark()."""
    overwrite = bool(getattr(args, "overwrite", False))
    outputs = [(Path(value), OUTPUTS[name], _flag(OUTPUTS[name], prefix))
               for name, prefix, value in _options(args) if name in OUTPUTS]
    inputs = _inputs(args, uses_store)
    run_dir = getattr(args, "out", None)
    planned = []
    for i, (path, out, flag) in enumerate(outputs):
        planned.append(check_one(path, out, overwrite, flag, run_files))
        for earlier, _, other in outputs[:i]:
            if path.absolute() == earlier.absolute() or _same(path, earlier):
                raise UsageError(f"{flag} {path}: {other} writes there too; give each its own file")
            if _within(path, earlier) or _within(earlier, path):
                raise UsageError(f"{flag} {path} and {other} {earlier}: one would be a folder of the other; give "
                                 "each a file of its own")
        for source in inputs:
            if path.absolute() == source.absolute() or _same(path, source):
                raise UsageError(f"{flag} {path} is one of this command's inputs: write {out.what} elsewhere")
    if run_dir is not None:
        theirs = [f.absolute() for f in run_files(Path(run_dir))]
        for path, out, flag in outputs:
            if path.absolute() == Path(run_dir).absolute() or _within(Path(run_dir), path):
                raise UsageError(f"{flag} {path}: the run's folder --out {run_dir} goes there; write {out.what} "
                                 "elsewhere")
            if path.absolute() in theirs:
                raise UsageError(f"{flag} {path} is one of the files of this run's folder: write {out.what} "
                                 "elsewhere")
        for source in inputs:
            if _same(Path(run_dir), source) or (source.name == "run.json" and _same(Path(run_dir), source.parent)):
                raise UsageError(f"--out {run_dir} is one of this command's inputs: give the run its own folder")
    return planned


def mark(planned: list[Planned]) -> None:
    """Each output the command wrote (a regular file that was not there, or not this one, before it ran)
    marked as clusterbench's of its kind, for the next run to replace without --overwrite. Where the file
    system keeps no extended attributes the file stays unmarked: the next run asks for --overwrite."""
    for p in planned:
        if p.out.kind is None:
            continue
        try:
            st = os.lstat(p.path)
            if not stat.S_ISREG(st.st_mode) or (st.st_ino, st.st_mtime_ns) == p.before:
                continue
            data = _read(p.path)
            if data is not None:
                os.setxattr(p.path, MARK, _mark(p.out.kind, data), follow_symlinks=False)
        except (OSError, AttributeError):
            continue
