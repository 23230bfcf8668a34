"""Run folders: run.json and one CSV per table, complete on disk after every update.

Rank 0 owns the folder and writes every result as it arrives, so a run that stops early still
leaves parseable files with every row measured so far: each row is appended to its table's CSV
in one write, and run.json is rewritten atomically (by a hot loop only every so often, which a
run.json growing with every row would otherwise slow).

Nothing written earlier is replaced unasked: a run folder that holds a run's files is refused unless
the user adds --overwrite (the other outputs a user names: results/outputs.py).
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import socket
import time
import uuid
from dataclasses import fields
from pathlib import Path
from typing import Any

from clusterbench.errors import RunFailed, UsageError, one_line
from clusterbench.results import codec, documents, table_csv
from clusterbench.results.run import CORE, Env, Run, Section, Sections, from_doc, to_doc, upgraded
from clusterbench.secrets import masked_argv

# Every pair of 2,048 nodes (--pairs all) is 4.2 million rows, about 340 MB of pairs.csv: read, but not past this.
IN_CSV_LIMIT = 1024**3
NCCL_LOGS = "nccl"  # the subfolder of per-rank NCCL logs (NCCL runs)
FLIGHT_DUMPS = "flight"  # the subfolder of per-rank Flight Recorder dumps (a run whose ranks hung or timed out)
RANK_FOLDERS = (NCCL_LOGS, FLIGHT_DUMPS)
# run.json grows with a run: a hot loop rewrites it once its last save lies this many times that save's
# duration back, so saving costs the loop about a fiftieth of its time, however large the run; each row
# is in its CSV at once.
SAVES_APART = 50


def default_run_dir(command: str) -> Path:
    return Path("runs") / f"{documents.utc_stamp()}-{command}"


def _run_json(path: Path) -> Path:
    """The run.json of a run folder given as the folder or as the file."""
    return path / "run.json" if path.is_dir() and path.name != "run.json" else path  # a folder named run.json is no run


class RunFolder:
    """A run's folder, the one object every command and stage touches it through: the files a run leaves there
    (files, claim, announce), the run read back and saved after its conclusion (load, save), and rank 0's record
    of a run as it is measured (begin, record, append, extend, append_csv, write_csv, flush, finish).

    `sections` are the sections of run.json this clusterbench declares (stages/registry.py): how each is read and
    checked, which are kept in CSVs beside run.json. Rank 0 writes every result as it arrives: a row to its
    table's CSV in one write, run.json atomically (by a hot loop only every so often, see SAVES_APART).
    """

    def __init__(self, path: str | Path, sections: Sections) -> None:
        self.path = Path(path)
        self.sections = sections
        self.run = Run()  # what begin() starts, or the run load() read
        self._saved_at = 0.0
        self.save_s = 0.0
        self._csv_rows: dict[str, int] = {}  # the rows of each table's CSV on disk

    @property
    def json_path(self) -> Path:
        return self.path / "run.json"

    # --- the files of a run ---------------------------------------------------------------------------------

    def files(self) -> list[Path]:
        """Every file a run may leave in its folder, beside the NCCL logs and dumps."""
        names = ["run.json"]
        for section in self.sections.values():
            names += [f"{section.name}.csv"] if section.in_csv else []
            names += list(section.files)
        return [self.path / name for name in dict.fromkeys([*names, "report.html"])]

    def claim(self, overwrite: bool) -> RunFolder:
        """Make the folder this run's before any work starts: writable, and holding no earlier run's files unless
        `overwrite` (then they go, so none of them is mistaken for this one's)."""
        path = self.path
        if path.exists() and not path.is_dir():  # a run.json, a baseline: never replaced by a folder
            raise UsageError(f"--out {path} is a file, not a folder: give the folder the run's files go to")
        documents.check_writable(path, "the run folder")
        found = [f for f in [*self.files(), *(path / name for name in RANK_FOLDERS)] if _exists(f)]
        if found and not overwrite:
            what = ("a run (run.json)" if path / "run.json" in found
                    else f"a run's files ({', '.join(f.name for f in found)})")
            raise UsageError(f"--out {path} already holds {what}: choose another folder, or add --overwrite to "
                             "replace it")
        for file in found:
            _remove(file, path)
        return self

    def announce(self, stream: Any) -> None:
        """The line that names the files a run left."""
        print(f"# results: {', '.join(str(f) for f in self.files() if f.exists())}", file=stream, flush=True)

    # --- a finished run, read and saved ---------------------------------------------------------------------

    def load(self) -> Run:
        """The run (the folder may be given as its run.json), checked field by field and upgraded to this version;
        one that never finished, with the rows its CSVs hold beyond its last save (catch_up)."""
        file = _run_json(self.path)
        if not os.path.lexists(file):
            raise UsageError(f"no run found at {self.path}: {file} does not exist")
        doc, version = documents.versioned(file, documents.RUN)
        try:
            doc = upgraded(doc, version, self.sections)
            loaded = from_doc(doc, self.sections)
        except codec.SchemaError as e:
            raise UsageError(f"{file}: field {e}") from None
        counted = [s for s in self.sections.values() if s.counted_as is not None and s.name not in doc]
        for section in counted:  # version 7 on: in their CSV alone
            self._read_counted(loaded, file.parent, section, doc.get(section.counted_as, 0))
        if loaded.status == "running":
            catch_up(loaded, file.parent, [s for s in self.sections.values() if s.in_csv and s not in counted])
        self.run = loaded
        return loaded

    def _read_counted(self, loaded: Run, folder: Path, section: Section[Any], count: int) -> None:
        """A table kept in its CSV alone, as run.json counted it at its last save: the CSV may hold more (rows
        that reached it after), never fewer."""
        path = folder / f"{section.name}.csv"
        if not os.path.lexists(path):
            if count:
                raise UsageError(f"{path} is missing, and run.json records {count} rows there: copy the run folder "
                                 "whole")
            return
        try:
            rows = table_csv.read_rows(path, section.row, IN_CSV_LIMIT)
        except ValueError as e:
            raise UsageError(f"the run's {path.name} cannot be read: {e}") from None
        if len(rows) < count:
            raise UsageError(f"{path} holds {len(rows)} rows, and run.json records {count}: the file was cut short")
        section.set(loaded, rows)

    def save(self, finished: Run | None = None) -> Path:
        """run.json of `finished` (a run that was loaded, after its conclusion changed it), or of the run rank 0
        records, atomically."""
        started = time.monotonic()
        target = finished if finished is not None else self.run
        file = _run_json(self.path) if finished is not None else self.json_path
        _write(file, documents.text_of(to_doc(target, self.sections)))
        if finished is None:
            self._saved_at = time.monotonic()
            self.save_s = self._saved_at - started  # what a hot loop weighs its next save against
        return file

    # --- rank 0's record of a run as it is measured ---------------------------------------------------------

    def begin(self, command: str, argv: list[str]) -> RunFolder:
        """A new run in the folder (claim() proved it writable before any rank started), saved at once."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.run = Run(command=command, argv=masked_argv(argv), uid=uuid.uuid4().hex,
                       started_utc=documents.utc_stamp(), env=Env(hostname=socket.gethostname()))
        self.save()
        return self

    def _section(self, name: str) -> Section[Any]:
        if name not in self.sections:
            raise AttributeError(f"run.json has no section {name!r}")
        return self.sections[name]

    def record(self, min_interval_s: float = 0.0, **values: Any) -> None:
        """Set parts of run.json (a field of its core, or a section as its declared record) and save: a hot loop
        passes min_interval_s, so that run.json is rewritten at most that often, and saves once more at its end."""
        for name, value in values.items():
            if name in CORE:
                setattr(self.run, name, value)
            else:
                self._section(name).set(self.run, value)
        if time.monotonic() - self._saved_at >= min_interval_s:
            self.save()

    @property
    def hot_interval_s(self) -> float:
        """How far apart a hot loop's saves of run.json should lie: SAVES_APART times the last one's duration."""
        return SAVES_APART * self.save_s

    def append(self, table: str, row: Any, min_interval_s: float = 0.0) -> None:
        """Add a row to a table of run.json and to <table>.csv.

        The row is appended to <table>.csv at once (the whole file written where it is new). A hot loop passes
        min_interval_s so that run.json, which grows with the run, is rewritten at most once per interval;
        whoever does must call flush() when it ends, however it ends.
        """
        self._add_rows(table, [row])
        if time.monotonic() - self._saved_at >= min_interval_s:
            self.save()

    def extend(self, table: str, rows: list[Any]) -> None:
        """Add rows to a table kept in its CSV alone, in one write; run.json learns how many at its next save.
        A hot loop's batch costs one write, and no rewrite of run.json."""
        if rows:
            self._add_rows(table, rows)

    def append_csv(self, table: str, rows: list[Any]) -> None:
        """Rows of a CSV a section keeps beside run.json (its `files`: burnin.csv), appended in one write (the
        whole file written where it is new); the section itself is the stage's to record."""
        if not rows:
            return
        if table not in self._csv_rows:
            self.write_csv(table, rows)
            self._csv_rows[table] = len(rows)
        else:
            self._append_csv(table, rows)

    def flush(self) -> None:
        """run.json with the rows appended since its last save: the CSVs hold them already."""
        self.save()

    def _add_rows(self, table: str, rows: list[Any]) -> None:
        """`rows` at the end of the table in memory and of <table>.csv, in one write: a reader, or a run killed
        now, finds each row whole or not at all (the whole file written where it is new)."""
        section = self._section(table)
        if not section.in_csv:
            raise AttributeError(f"run.json's section {table!r} keeps no CSV")
        kept = section.of(self.run)
        kept += rows
        if self._csv_rows.get(table) != len(kept) - len(rows):
            self.write_csv(table, kept)
            self._csv_rows[table] = len(kept)
            return
        self._append_csv(table, rows)

    def _append_csv(self, table: str, rows: list[Any]) -> None:
        """`rows` at the end of <table>.csv, which holds its header already, in one write."""
        buf = io.StringIO()
        csv.DictWriter(buf, fieldnames=[f.name for f in fields(rows[0])], lineterminator="\n").writerows(
            codec.dump(r) for r in rows)
        path, data = self.path / f"{table}.csv", buf.getvalue().encode("utf-8")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            try:
                if os.write(fd, data) != len(data):
                    raise OSError(f"{len(data)} bytes could not all be written")
            finally:
                os.close(fd)
        except OSError as e:
            raise RunFailed(f"cannot write {path} ({e.strerror or e})") from None
        self._csv_rows[table] += len(rows)

    def write_csv(self, table: str, rows: list[Any]) -> None:
        """<table>.csv from `rows` (records of one type, at least one), atomically."""
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=[f.name for f in fields(rows[0])], lineterminator="\n")
        writer.writeheader()
        writer.writerows(codec.dump(r) for r in rows)
        _write(self.path / f"{table}.csv", buf.getvalue())

    def finish(self, status: str, error: str | None = None) -> None:
        self.run.status = status  # type: ignore[assignment]
        self.run.error = error
        self.run.finished_utc = documents.utc_stamp()
        self.flush()

    def finish_failed(self, e: BaseException) -> None:
        """Record how the work ended, if the disk still lets us: the first error is the one reported."""
        try:
            self.finish("interrupted" if isinstance(e, KeyboardInterrupt) else "failed", one_line(e))
        except RunFailed:
            pass


def _remove(file: Path, folder: Path) -> None:
    """An earlier run's file, or its folder of NCCL logs or dumps; anything else in the way is the user's to move."""
    try:
        if file.name in RANK_FOLDERS and file.is_dir() and not file.is_symlink():
            shutil.rmtree(file)
        else:
            file.unlink()
    except OSError as e:
        raise UsageError(f"--out {folder}: cannot remove the earlier {file.name} ({e.strerror or e})") from None


def _exists(path: Path) -> bool:
    """True for anything at `path`, a broken symbolic link included."""
    return path.exists() or path.is_symlink()


def catch_up(loaded: Run, folder: Path, sections: list[Section[Any]]) -> None:
    """Adds to `loaded` each section's rows that reached its CSV after run.json's last save: all of them where a
    rank 0 killed mid-run never saved again. A CSV that does not begin with run.json's rows, or cannot be read,
    is not this run's record of them and is left out."""
    for section in sections:
        rows = section.of(loaded)
        path = folder / f"{section.name}.csv"
        if not path.exists():
            continue
        try:
            found = table_csv.read_rows(path, section.row)
        except ValueError:
            continue
        if len(found) > len(rows) and found[:len(rows)] == rows:
            rows += found[len(rows):]


def _write(path: Path, text: str) -> None:
    """A run folder file, atomically: a failure mid-run (a full disk) fails the run in one line,
    and the file keeps its last complete version."""
    try:
        documents.atomic_write(path, text)
    except OSError as e:
        raise RunFailed(f"cannot write {path} ({e.strerror or e})") from None
