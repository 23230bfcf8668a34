"""A folder of Flight Recorder dumps read as one record per rank.

PyTorch writes one file per rank when a collective times out (or when asked): its name is a prefix
and the rank (TORCH_FR_DUMP_TEMP_FILE, formerly TORCH_NCCL_DEBUG_INFO_TEMP_FILE, by default
/tmp/nccl_trace_rank_<rank>), its content a pickle (or JSON, from the JSON dump) of a dict: the
format's `version` ("2.3" .. "2.10" so far; every 2.x keeps the entry fields read here), `pg_config`
(each process group's global ranks, where the backend records them), `pg_status`, and `entries`, one
per collective or point-to-point op the rank enqueued, oldest first, the last N kept
(TORCH_FR_BUFFER_SIZE). A file is a dump when its name ends in the rank, optionally followed by
.json, .pkl or .pickle; hidden files (half-written temporaries) and names without a rank are left out
with a note. Every file so named must be a dump: a damaged, truncated or foreign one is refused in
one line naming it, since a diagnosis without one rank's record would blame that rank.

The rank is the number ending the name; a dump that states its own rank (torch's do not; ours,
flight/record.py, add `rank` and `hostname`) must agree with it. Several dumps of one rank (a job
dumped twice, or two prefixes): the newest file is read and the others named. Torch's format records
no host: hosts come from the dump where it has one, else from the file names where the prefix holds
one (TORCH_FR_DUMP_TEMP_FILE=/shared/fr/nccl_trace_rank_$(hostname)_ gives nccl_trace_rank_node07_40,
as pytorch/pytorch#140879 shows): the one part, between underscores, in which the names differ, when
it reads as a host name. Otherwise the host is "not recorded", never guessed.

What is read is bounded before it is built (docs/methodology.md, "Hangs"): a file's size (DUMP_LIMIT),
what its pickle would build (unpickle.MAX_MEMORY), its entries (MAX_ENTRIES), a folder's bytes and entries
in all (MAX_FOLDER_BYTES, MAX_FOLDER_ENTRIES: the work of a folder, and what is kept in memory), and every
rank, named or listed (below MAX_RANKS). Entries are read field by field (flight/entries.py), never copied
whole. Text that is printed (names of groups, ops, hosts) is printable and short, so a dump cannot write
lines of its own into the diagnosis.
"""

from __future__ import annotations

import gc
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from clusterbench.argtypes import clipped
from clusterbench.errors import UsageError
from clusterbench.flight import unpickle
from clusterbench.flight.entries import Bad, Entry, named, read, refused
from clusterbench.inputs import documents, files
from clusterbench.runtime.launchers import MAX_WORLD_SIZE

# torch's dump of its default 2,000 entries, each with a 30-frame stack, is 1.4 MiB (measured, torch 2.13);
# 20,000 entries 14 MiB. Past this a file is not a dump, and JSON of this size builds at most ~0.7 GiB.
DUMP_LIMIT = 32 * files.MIB
# torch keeps 2,000 entries by default (TORCH_FR_BUFFER_SIZE, formerly TORCH_NCCL_TRACE_BUFFER_SIZE), users
# who raise it pick 20,000: five times that is no buffer anyone runs.
MAX_ENTRIES = 100_000
# The work of a folder in all, bounded before it is done: its entries (each read, kept as some 300 bytes and
# analysed) and its bytes (each scanned and unpickled). At either bound diagnose takes 12-17 s on a 2-core
# CPU (measured 2026-12-04): 500 ranks of torch's default 2,000 entries, 3,900 of clusterbench's own 256
# (flight/record.py); 180 ranks of torch's default dumps with stacks (1.4 MiB each), 1,300 without.
MAX_FOLDER_ENTRIES = 1_000_000
MAX_FOLDER_BYTES = 256 * files.MIB
MAX_RANKS = MAX_WORLD_SIZE  # the largest job clusterbench runs or reads (runtime/launchers.py)
_MAX_DIGITS = 18  # a rank written with more is past any bound, and past what a 64-bit id holds
UNREAD = frozenset({"frames"})  # each entry's stack: most of a dump's bytes, and nothing the analysis reads
ENTRIES = frozenset({"entries"})  # read field by field as they are (entries.read), never copied or walked whole
NAME = re.compile(r"^(?P<head>.*?)(?P<rank>\d+)(?:\.(?:json|pkl|pickle))?$")
_VERSION = re.compile(r"^(\d+)\.(\d+)$")
NEWEST_MAJOR = 2
_HOST = re.compile(r"^(?=.*[A-Za-z])[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$")  # RFC 1123, a letter somewhere
_HOSTNAME = re.compile(r"[!-~]{1,253}")  # what a recorded hostname may be: printable, no space, DNS's length
_RANK_LIST = re.compile(r"\[\s*(?:\d+\s*(?:,\s*\d+\s*)*)?\]")  # pg_config's "[0, 1, 2]"
_NUMBERS = re.compile(r"\d+")


@dataclass(frozen=True)
class Dump:
    path: Path
    rank: int
    version: str
    host: str | None
    entries: tuple[Entry, ...]
    groups: dict[str, tuple[int, ...]]  # process group name -> its global ranks, where pg_config has them
    library: str = ""  # the communication library's version (comm_lib_version, nccl_version), where stated


@dataclass
class Folder:
    dumps: list[Dump]  # one per rank, by rank
    notes: list[str] = field(default_factory=list)


def candidates(folder: Path) -> tuple[list[Path], list[str]]:
    """The entries of `folder` named like dumps, and the names of the others (hidden files aside)."""
    try:
        names = sorted(os.listdir(folder))
    except OSError as e:
        raise UsageError(f"cannot list {folder} ({e.strerror or e})") from None
    named = [folder / n for n in names if not n.startswith(".") and NAME.match(n)]
    others = [n for n in names if not n.startswith(".") and not NAME.match(n)]
    return named, others


def _sniff(data: bytes) -> str | None:
    """"pickle" or "json" by the first byte: torch's pickles start with the PROTO opcode, its JSON with {."""
    head = data.lstrip()[:1]
    return "pickle" if data[:1] == b"\x80" else "json" if head == b"{" else None


def looks_like_dump(path: Path) -> bool:
    """True for a regular file whose first bytes are a pickle's or a JSON object's: cheap, reads 64 bytes."""
    if not files.is_regular(path):
        return False
    try:
        with open(path, "rb") as f:
            return _sniff(f.read(64)) is not None
    except OSError:
        return False


def _text(value: Any, path: Path, where: str, pool: dict[Any, Any]) -> str:
    """`value` when it is printable text of at most entries.MAX_TEXT characters, shared with its equals in `pool`."""
    try:
        return named(value, pool, where)
    except Bad as e:
        raise refused(path, str(e)) from None


def _listed_ranks(ranks: Any, path: Path, name: str) -> tuple[int, ...]:
    """A group's ranks as pg_config lists them ("[0, 1, 2]" as text in the pickle, a list in some JSON);
    empty where it lists none or in another form. A rank past any job is damage."""
    if isinstance(ranks, str):
        ranks = [] if _RANK_LIST.fullmatch(ranks.strip()) is None else _NUMBERS.findall(ranks)
        if any(len(r.lstrip("0")) > _MAX_DIGITS for r in ranks):  # int() is never asked for thousands of digits
            raise refused(path, f"pg_config lists a rank of {len(max(ranks, key=len))} digits in group {name!r}")
        ranks = [int(r) for r in ranks]
    if not isinstance(ranks, list) or not all(documents.whole_number(r) for r in ranks):
        return ()
    if any(not 0 <= r < MAX_RANKS for r in ranks):
        raise refused(path, f"pg_config lists rank {max(ranks, key=abs)} in group {name!r}; ranks are 0 to "
                          f"{MAX_RANKS - 1}")
    return tuple(ranks)


def _groups(config: Any, path: Path) -> dict[str, tuple[int, ...]]:
    """pg_config's ranks per group: only groups that list some, since Gloo leaves a group's entry empty."""
    found: dict[str, tuple[int, ...]] = {}
    for name, conf in (config.items() if isinstance(config, dict) else ()):
        ranks = _listed_ranks(conf.get("ranks"), path, name) if isinstance(conf, dict) else ()
        if ranks:
            found[name] = ranks
    return found


def _document(data: bytes, path: Path, room: int) -> Any:
    """The plain data of a dump's bytes, torch's pickle or its JSON, within unpickle's bounds and MAX_ENTRIES,
    and within `room`, the entries its folder may still hold."""
    kind = _sniff(data)
    if not data.strip():
        raise refused(path, "the file is empty: a dump still being written, or one that failed")
    if kind is None:
        raise refused(path, "neither a pickle nor JSON")

    def admit(doc: Any) -> None:
        entries = doc.get("entries") if isinstance(doc, dict) else None
        if isinstance(entries, (list, tuple)) and len(entries) > MAX_ENTRIES:
            raise refused(path, f"{len(entries)} entries, more than the {MAX_ENTRIES} any Flight Recorder buffer "
                              "keeps; torch's default is 2,000")
        if isinstance(entries, (list, tuple)) and len(entries) > room:
            raise UsageError(f"{path.parent}: more than {MAX_FOLDER_ENTRIES} entries in its dumps, as far as "
                             f"{path.name}: more than clusterbench reads at once; diagnose a folder of fewer "
                             "ranks' dumps")

    if kind == "pickle":
        return unpickle.loads(data, str(path), UNREAD, admit, raw=ENTRIES)
    try:
        doc = documents.load_json(data.decode("utf-8"), str(path))
    except UnicodeDecodeError as e:
        raise refused(path, f"not UTF-8 text at byte {e.start}") from None
    admit(doc)
    if not isinstance(doc, dict):
        return documents.check_tree(doc, str(path))
    # The entries are read field by field (entries.read); the rest, a few groups' configuration, checked whole.
    rest = documents.check_tree({k: v for k, v in doc.items() if k not in ENTRIES}, str(path))
    return {**rest, **{k: doc[k] for k in ENTRIES if k in doc}}


def _version(doc: Any, path: Path) -> str:
    if not isinstance(doc, dict) or "version" not in doc:
        raise refused(path, "no format version in it")
    version = doc["version"]
    match = _VERSION.match(version) if isinstance(version, str) else None
    if match is None:
        raise refused(path, f"version {version!r} is not a Flight Recorder format version such as 2.10")
    if int(match.group(1)) > NEWEST_MAJOR:
        raise UsageError(f"{path}: Flight Recorder format {version}; this clusterbench reads formats "
                         f"{NEWEST_MAJOR}.x: upgrade clusterbench to read it")
    return version


def _host(doc: dict[str, Any], path: Path) -> str | None:
    host = doc.get("hostname")
    if host is None:
        return None
    if not isinstance(host, str) or not _HOSTNAME.fullmatch(host):
        raise refused(path, "its hostname is not a host name (printable, no spaces, at most 253 characters)")
    return host


def _library(doc: dict[str, Any], path: Path, pool: dict[Any, Any]) -> str:
    """The communication library's version: comm_lib_version (format 2.10 on), nccl_version before."""
    value = doc.get("comm_lib_version", doc.get("nccl_version", ""))
    return _text(value, path, "its comm_lib_version", pool) if value else ""


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector held while a dump is built and read: it walks every container each time a
    few hundred are made, and a dump is millions of them, none of which it could free (half the time it took)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def parse(data: bytes, path: Path, rank: int, room: int = MAX_FOLDER_ENTRIES,
          pool: dict[Any, Any] | None = None) -> Dump:
    """One rank's dump from its bytes: torch's pickle or its JSON, of at most `room` entries; its names and
    shapes shared with their equals in `pool` (a folder's, so that equal ones of all ranks are one object)."""
    with _collector_paused():
        return _parse(data, path, rank, room, {} if pool is None else pool)


def _parse(data: bytes, path: Path, rank: int, room: int, pool: dict[Any, Any]) -> Dump:
    doc = _document(data, path, room)
    version = _version(doc, path)
    entries = doc.get("entries")
    if not isinstance(entries, (list, tuple)):
        raise refused(path, "no entries list: dumped without its collectives (includeCollectives=False)?")
    own = doc.get("rank")
    if own is not None and own != rank:
        said = f"rank {own}" if documents.whole_number(own) else "a rank that is not a number"
        raise UsageError(f"{path}: the dump says {said} but its name says rank {rank}")
    seen: dict[int, Any] = {}  # by id: only while this dump's objects live
    return Dump(path=path, rank=rank, version=version, host=_host(doc, path),
                entries=tuple(read(e, path, i, pool, seen) for i, e in enumerate(entries)),
                groups=_groups(doc.get("pg_config"), path), library=_library(doc, path, pool))


def hosts_from_names(heads: dict[int, str]) -> dict[int, str]:
    """Rank -> host, where the names' heads (what precedes the rank), cut at "_" (which no host name
    holds), differ in exactly one part and that part reads as a host name: "nccl_trace_rank_node02_5"
    and "nccl_trace_rank_node07_40" give node02 and node07. Otherwise none: one host's names cannot
    tell its name from the prefix."""
    parts = {rank: head.split("_") for rank, head in heads.items()}
    if len(parts) < 2 or len({len(p) for p in parts.values()}) != 1:
        return {}
    differ = [i for i in range(len(next(iter(parts.values())))) if len({p[i] for p in parts.values()}) > 1]
    if len(differ) != 1:
        return {}
    found = {rank: p[differ[0]] for rank, p in parts.items()}
    return found if all(_HOST.match(h) for h in found.values()) else {}


def _rank_of(path: Path) -> int:
    """The rank ending a dump's name; a rank past any job is refused before anything is sized by it."""
    digits = NAME.match(path.name).group("rank")
    if len(digits.lstrip("0")) > _MAX_DIGITS or int(digits) >= MAX_RANKS:
        raise UsageError(f"{path}: its name says rank {clipped(digits)}, past the {MAX_RANKS} ranks of the largest "
                         "job clusterbench reads: not a rank's dump")
    return int(digits)


def _newest(rank: int, paths: list[Path], notes: list[str], room: int, pool: dict[Any, Any]) -> Dump:
    """The newest of a rank's dumps, every one of them read (each file so named must be a dump)."""
    paths = sorted(paths, key=lambda p: (os.stat(p).st_mtime_ns, p.name))
    for p in paths[:-1]:
        parse(files.read_bytes(p, str(p), DUMP_LIMIT), p, rank, room, pool)
    if len(paths) > 1:
        notes.append(f"rank {rank}: {len(paths)} dumps; the newest, {paths[-1].name}, is read "
                     f"({', '.join(p.name for p in paths[:-1])} left out)")
    return parse(files.read_bytes(paths[-1], str(paths[-1]), DUMP_LIMIT), paths[-1], rank, room, pool)


def _size(paths: list[Path], folder: Path) -> None:
    """The bytes of every dump to read, refused past MAX_FOLDER_BYTES before any is read."""
    total = 0
    for p in paths:
        try:
            total += os.stat(p).st_size
        except OSError as e:
            raise UsageError(f"{p}: cannot read it ({e.strerror or e})") from None
    if total > MAX_FOLDER_BYTES:
        raise UsageError(f"{folder}: {total / files.MIB:.0f} MiB of dumps, more than the "
                         f"{MAX_FOLDER_BYTES // files.MIB} MiB clusterbench reads at once; diagnose a folder of "
                         "fewer ranks' dumps")


def read_folder(folder: Path) -> Folder:
    """Every rank's newest dump in `folder`, with notes on what was left out; a one-line UsageError for
    a folder with none, a file named like a dump that is not one, or more than MAX_FOLDER_ENTRIES entries or
    MAX_FOLDER_BYTES bytes in all."""
    if not os.path.isdir(folder):
        raise UsageError(f"no folder of Flight Recorder dumps at {folder}: it is {files.kind(folder)}")
    named, others = candidates(folder)
    notes = []
    regular = [p for p in named if files.is_regular(p)]
    if len(regular) < len(named):
        skipped = [p.name for p in named if p not in regular]
        notes.append(f"left out {', '.join(skipped[:3])}{' ...' if len(skipped) > 3 else ''}: not regular files")
    if not regular:
        raise UsageError(f"{folder}: no Flight Recorder dumps in it (torch names them <prefix><rank>, "
                         "nccl_trace_rank_0 by default)" + (f"; it holds {', '.join(others[:3])}" if others else ""))
    if others:
        notes.append(f"left out {len(others)} file(s) whose names end in no rank: {', '.join(others[:3])}"
                     + (" ..." if len(others) > 3 else ""))
    by_rank: dict[int, list[Path]] = {}
    for path in regular:
        by_rank.setdefault(_rank_of(path), []).append(path)
    _size(regular, folder)
    dumps, heads, kept, pool = [], {}, 0, {}
    for rank in sorted(by_rank):
        dumps.append(_newest(rank, by_rank[rank], notes, MAX_FOLDER_ENTRIES - kept, pool))
        heads[rank] = NAME.match(dumps[-1].path.name).group("head")
        kept += len(dumps[-1].entries)
    named_hosts = hosts_from_names(heads)
    dumps = [d if d.host or d.rank not in named_hosts else replace(d, host=named_hosts[d.rank]) for d in dumps]
    return Folder(dumps=dumps, notes=notes)
