"""The one result schema: run folders, run.json and the CSV files beside it.

Every command writes a run folder. Rank 0 owns it and rewrites each file atomically
(write a temporary file, then rename) whenever a result arrives, so a run that stops
early still leaves complete, parseable files with every row measured so far.
"""

from __future__ import annotations

import csv
import io
import json
import os
import socket
import tempfile
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from clusterbench import __version__
from clusterbench.errors import UsageError

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class CommRow:
    """One message size of one collective, as printed and as stored."""

    op: str
    size_bytes: int
    count: int
    dtype: str
    world_size: int
    in_place: bool
    duration_us: float
    throughput_gbps: float
    busbw_gbps: float
    wrong: int
    iters: int
    p50_us: float
    p99_us: float
    min_us: float
    max_us: float
    cv: float
    reduce_op: str | None = None
    root: int | None = None


COMM_COLUMNS = [f.name for f in fields(CommRow)]


def utc_stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def default_run_dir(command: str) -> Path:
    return Path("runs") / f"{utc_stamp()}-{command}"


def atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def prepare_run_dir(path: Path) -> Path:
    """Create the folder and prove it is writable, before any work starts."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"cannot write the run folder {path}: {e.strerror or e}") from None
    return path


class RunFolder:
    """run.json plus one CSV per table section, kept complete after every update."""

    def __init__(self, path: Path, command: str, argv: list[str]) -> None:
        self.path = prepare_run_dir(Path(path))
        self.doc: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "tool": "clusterbench",
            "version": __version__,
            "command": command,
            "argv": argv,
            "started_utc": utc_stamp(),
            "finished_utc": None,
            "status": "running",
            "error": None,
            "env": {"hostname": socket.gethostname()},
        }
        self._csv_columns: dict[str, list[str]] = {}
        self._unsaved: set[str] = set()
        self._saved_at = 0.0
        self.save()

    @property
    def json_path(self) -> Path:
        return self.path / "run.json"

    def save(self) -> None:
        atomic_write(self.json_path, json.dumps(self.doc, indent=1, default=str) + "\n")
        self._saved_at = time.monotonic()

    def update_env(self, env: dict[str, Any]) -> None:
        self.doc["env"].update(env)
        self.save()

    def set(self, key: str, value: Any) -> None:
        self.doc[key] = value
        self.save()

    def append(self, section: str, row: Any, columns: list[str] | None = None,
               min_interval_s: float = 0.0) -> None:
        """Add a row to a section of run.json and to <section>.csv.

        A hot loop passes min_interval_s so that writing never costs it more than one save per
        interval; whoever does must call flush() when it ends, however it ends.
        """
        record = asdict(row) if hasattr(row, "__dataclass_fields__") else dict(row)
        self.doc.setdefault(section, []).append(record)
        if columns is not None:
            self._csv_columns[section] = columns
        self._unsaved.add(section)
        if time.monotonic() - self._saved_at >= min_interval_s:
            self.flush()

    def flush(self) -> None:
        self.save()
        for section in sorted(self._unsaved):
            self._write_csv(section)
        self._unsaved.clear()

    def _write_csv(self, section: str) -> None:
        rows = self.doc[section]
        columns = self._csv_columns.get(section) or list(rows[0])
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        atomic_write(self.path / f"{section}.csv", buf.getvalue())

    def finish(self, status: str, error: str | None = None) -> None:
        self.doc["status"] = status
        self.doc["error"] = error
        self.doc["finished_utc"] = utc_stamp()
        self.flush()


def update_run(run_dir: Path, **fields: Any) -> None:
    """Set top-level fields of a run folder's run.json from outside the ranks that wrote it."""
    path = Path(run_dir) / "run.json"
    doc = json.loads(path.read_text())
    doc.update(fields)
    atomic_write(path, json.dumps(doc, indent=1, default=str) + "\n")


def mark_finished(run_dir: Path, status: str, error: str | None) -> None:
    """Record the end of a run whose rank 0 could not (it died, or was killed)."""
    try:
        doc = json.loads((Path(run_dir) / "run.json").read_text())
    except (OSError, ValueError):
        return
    if doc.get("status") == "running":
        update_run(run_dir, status=status, error=error, finished_utc=utc_stamp())


def read_json(path: Path, label: str) -> Any:
    """A JSON file of ours, or a one-line UsageError saying why it cannot be read."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{label}: cannot read {path} ({getattr(e, 'strerror', None) or e})") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{label}: not valid JSON (half-written or corrupt): {e.msg} at line {e.lineno}") from None


def load_run(path: str | Path) -> dict[str, Any]:
    """Read a run folder (or its run.json) and refuse anything this version cannot read."""
    p = Path(path)
    file = p / "run.json" if p.is_dir() else p
    if not file.exists():
        raise UsageError(f"no run found at {path}: {file} does not exist")
    doc = read_json(file, str(file))
    if not isinstance(doc, dict) or doc.get("tool") != "clusterbench":
        raise UsageError(f"{file} is not a clusterbench run.json")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise UsageError(
            f"{file} has schema version {doc.get('schema_version')}; "
            f"this clusterbench reads version {SCHEMA_VERSION}"
        )
    return doc
