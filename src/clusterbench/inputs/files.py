"""Which paths are read: regular files only, never more than a bound, opened so nothing can block.

A FIFO, a device or a folder where a file is expected would hang a reader or feed it without
end; a broken symbolic link is named as one rather than as a missing file. Files are opened
non-blocking and checked on the open descriptor, so a path swapped between the check and the
read is still refused.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from clusterbench.errors import UsageError

MIB = 1024**2
# run.json of the largest sweep (every op x 30 sizes x scopes x ranks' rows) is a few MiB; JSON of tiny
# lists grows about twentyfold in memory, so the bound also bounds what parsing one can take.
DOCUMENT_LIMIT = 64 * MIB
# The longest line `lines` hands on: far past any line a log or table of ours holds.
LINE_LIMIT = 64 * 1024

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _of(label: str, path: Path) -> str:
    """The start of an error line: the label, unless it is the path the line names anyway."""
    return "" if label == str(path) else f"{label}: "


def _why(e: OSError) -> str:
    return e.strerror or str(e)


def is_regular(path: Path) -> bool:
    """True for a regular file or a link to one; False for anything else, missing or broken."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def kind(path: Path) -> str:
    """What `path` is, in words: "a regular file", "a folder", "a FIFO (named pipe)", "a broken
    symbolic link", "missing" ..., for a line that says why it was left out."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a broken symbolic link" if os.path.islink(path) else "missing"
    except (OSError, ValueError) as e:
        return f"unreadable ({getattr(e, 'strerror', None) or e})"
    return "a regular file" if stat.S_ISREG(mode) else _kind(mode)


def regular_file(path: Path, label: str) -> Path:
    """`path` when it is a regular file (or a link to one), else a one-line UsageError saying what it is."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if path.is_symlink():
            raise UsageError(f"{_of(label, path)}{path} is a broken symbolic link (to {os.readlink(path)})") from None
        raise UsageError(f"{_of(label, path)}no such file {path}") from None
    except (OSError, ValueError) as e:
        raise UsageError(f"{_of(label, path)}cannot read {path} ({getattr(e, 'strerror', None) or e})") from None
    if not stat.S_ISREG(mode):
        raise UsageError(f"{_of(label, path)}{path} is {_kind(mode)}, not a regular file")
    return path


def _open(path: Path, label: str) -> tuple[int, int]:
    """A descriptor on a regular file and its size; opened non-blocking so that a FIFO cannot hang us."""
    regular_file(path, label)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise UsageError(f"{_of(label, path)}cannot read {path} ({_why(e)})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UsageError(f"{_of(label, path)}{path} is {_kind(info.st_mode)}, not a regular file")
    os.set_blocking(fd, True)
    return fd, info.st_size


def read_bytes(path: Path, label: str, limit: int = DOCUMENT_LIMIT) -> bytes:
    """The whole of a regular file no larger than `limit` bytes."""
    fd, size = _open(path, label)
    with os.fdopen(fd, "rb") as f:
        if size > limit:
            raise UsageError(f"{_of(label, path)}{path} is {size / MIB:.0f} MiB, more than the {limit / MIB:.0f} MiB "
                             "a file of this kind can be")
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise UsageError(f"{_of(label, path)}cannot read {path} ({_why(e)})") from None
    if len(data) > limit:  # grew while we read it
        raise UsageError(f"{_of(label, path)}{path} is more than the {limit / MIB:.0f} MiB a file of this kind can be")
    return data


def read_text(path: Path, label: str, limit: int = DOCUMENT_LIMIT) -> str:
    """A regular UTF-8 text file no larger than `limit` bytes."""
    try:
        return read_bytes(path, label, limit).decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{_of(label, path)}{path} is not UTF-8 text (byte {e.start} cannot be read)") from None


def lines(path: Path, label: str, width: int = LINE_LIMIT) -> Iterator[str]:
    """A text file of any size, one line at a time (undecodable bytes replaced): memory stays flat.

    A line longer than `width` characters is cut to its first `width`, the rest of it skipped: a
    file with no newline at all (binary junk, a disk image) would otherwise be one line as big as
    itself.
    """
    fd, _ = _open(path, label)
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace", newline=None) as f:
        try:
            while line := f.readline(width):
                cut = line
                while len(cut) == width and not cut.endswith("\n"):
                    cut = f.readline(width)
                yield line
        except OSError as e:
            raise UsageError(f"{_of(label, path)}cannot read {path} ({_why(e)})") from None


def regular_files(folder: Path, pattern: str) -> tuple[list[Path], list[Path]]:
    """The regular files of `folder` matching `pattern`, sorted, and the other entries that match it
    (folders, FIFOs, broken links), so a caller can say what it left out. A folder that is not there
    has none; one that cannot be listed is a one-line UsageError, not an empty folder."""
    try:
        names = fnmatch.filter(os.listdir(folder), pattern)
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    except OSError as e:
        raise UsageError(f"cannot list {folder} ({_why(e)})") from None
    kept, skipped = [], []
    for path in sorted(Path(folder) / name for name in names):
        (kept if is_regular(path) else skipped).append(path)
    return kept, skipped
