"""Every JSON document clusterbench reads or writes: a kind, a schema version, a typed record.

Run folders (run.json), baselines and loss references go through one reader: the boundary
(inputs/) refuses a file that is not a regular file, too large, half-written, nested without
bound or holding a number that is not finite; this module refuses one of another kind, whose
schema_version is not a whole number it knows, or with a field that does not fit, in one line
naming the file and the field; it upgrades an older version step by step. Writes are atomic and
strict JSON, with the mode the user's umask gives (a report copied to a web server must be readable).
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterbench.errors import RunFailed, UsageError
from clusterbench.inputs.documents import read_json, version
from clusterbench.results import codec
from clusterbench.results.run import RUN_KIND, SCHEMA_VERSION, Run

Upgrade = Callable[[dict[str, Any]], dict[str, Any]]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()


@dataclass(frozen=True)
class DocumentKind:
    """One kind of document: its "kind" value, current version, record type and upgrades."""

    name: str
    label: str  # how messages call it
    version: int
    record: type
    upgrades: dict[int, Upgrade] = field(default_factory=dict)  # from version v to v + 1
    # The version of a document written before it carried this kind's markers, or None.
    legacy: Callable[[dict[str, Any]], int | None] = lambda doc: None
    hint: str = ""  # what to do with a document of this kind that cannot be read


@dataclass(frozen=True)
class MetricStats:
    mean: float
    min: float
    max: float
    count: int = field(metadata=codec.AT_LEAST_ONE)

    def __post_init__(self) -> None:
        if self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}")


@dataclass(frozen=True)
class Band:
    """What a metric's healthy nodes of one class measure: learned from the fleet, or from a baseline."""

    klass: str
    metric: str
    median: float
    spread: float = field(metadata=codec.NONNEGATIVE)  # robust: 1.4826 x the median absolute deviation
    nodes: int = field(metadata=codec.NONNEGATIVE)  # how many nodes it stands on (after the exclusions)
    source: str = "this fleet"


@dataclass(frozen=True)
class Baseline:
    """Each metric's mean, min, max and count over several runs (docs/methodology.md §6)."""

    created_utc: str
    runs: list[str]
    metrics: dict[str, MetricStats]
    kind: str = "clusterbench-baseline"
    schema_version: int = 1
    # From the results store (baseline --from-store): the one hardware class it stands for, and each
    # node figure's band over that class's healthy nodes, which `fleet --baseline` and `check` judge by.
    klass: str | None = None
    bands: list[Band] = field(default_factory=list)
    source: str | None = None  # the store and the period it was built from


# Its record and upgrades are the core's and each section's (results/run.py), read by RunFolder.load.
RUN = DocumentKind(RUN_KIND, "run.json", SCHEMA_VERSION, Run,
                   legacy=lambda doc: doc.get("schema_version") if doc.get("tool") == "clusterbench" else None,
                   hint="run the command again with this clusterbench")
BASELINE = DocumentKind("clusterbench-baseline", "baseline", 1, Baseline, hint="make one with clusterbench baseline")


def versioned(path: Path, kind: DocumentKind, label: str | None = None) -> tuple[dict[str, Any], int]:
    """The document at `path` as JSON values, proved of `kind` and of a version this clusterbench reads."""
    label = label or str(path)
    doc = read_json(Path(path), label)
    if not isinstance(doc, dict):
        raise UsageError(f"{label}: not a clusterbench {kind.label} ({kind.hint})")
    marked = doc.get("kind")
    if marked == kind.name and "schema_version" in doc:
        found = doc["schema_version"]
    else:
        found = kind.legacy(doc) if marked in (None, kind.name) else None
    if found is None:
        what = f"a {marked}, " if isinstance(marked, str) and marked.startswith("clusterbench-") else ""
        raise UsageError(f"{label}: {what}not a clusterbench {kind.label} ({kind.hint})")
    return doc, version(found, label, kind.version, kind.label)


def read(path: Path, kind: DocumentKind, label: str | None = None) -> Any:
    """The document at `path` as `kind`'s record, upgraded to the current version."""
    label = label or str(path)
    doc, at = versioned(path, kind, label)
    try:
        while at < kind.version:
            if at not in kind.upgrades:
                raise UsageError(f"{label} has schema version {at}, too old for this clusterbench: {kind.hint}")
            doc = kind.upgrades[at](doc)
            at += 1
        return codec.load(kind.record, doc)
    except codec.SchemaError as e:
        raise UsageError(f"{label}: field {e}") from None


# A document up to this size is indented for the eye; a larger one (a fleet of thousands of nodes) is written
# compact, which Python's JSON encoder writes five times faster.
INDENTED_UP_TO = 1024**2


def to_text(record: Any) -> str:
    return text_of(codec.dump(record))


def text_of(doc: Any) -> str:
    """JSON values as a document's text: strict JSON, indented where it is small enough to read."""
    text = json.dumps(doc, allow_nan=False)
    return (json.dumps(doc, indent=1, allow_nan=False) if len(text) <= INDENTED_UP_TO else text) + "\n"


def write(path: Path, record: Any, label: str) -> Path:
    """Write a document atomically; a failure is one line naming what could not be written."""
    return write_text(Path(path), to_text(record), label)


def write_text(path: Path, text: str, label: str) -> Path:
    """Write a file atomically, creating its folder; a failure is one line naming the file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text)
    except OSError as e:
        raise write_failure(path, e, label) from None
    return path


_NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def write_failure(path: Path, e: OSError, label: str) -> Exception:
    """A full disk fails the run (exit 1); a place that cannot be written is the user's to change (exit 2)."""
    why = e.strerror or str(e)
    if e.errno in _NO_ROOM:
        return RunFailed(f"{label}: cannot write {path} ({why}): free some space or write elsewhere")
    return UsageError(f"{label}: cannot write {path} ({why})")


def atomic_write(path: Path, text: str | bytes) -> None:
    """Readers see the old file or the new one, never half of one. Text is written as UTF-8."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _FILE_MODE)  # mkstemp makes 0600 files
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8") if isinstance(text, str) else text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_writable(folder: Path, label: str) -> Path:
    """Create `folder` and prove a file can be written in it, before any work starts."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-test.")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UsageError(f"{label}: cannot write in {folder} ({e.strerror or e})") from None
    return folder


def utc_stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
