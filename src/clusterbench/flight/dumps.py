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
what its pickle would build (unpickle.MAX_MEMORY), its entries (MAX_ENTRIES), a folder's entries in all
(MAX_FOLDER_ENTRIES, what is kept in memory), and every rank, named or listed (below MAX_RANKS). Text
that is printed (names of groups, ops, hosts) is printable and short, so a dump cannot write lines of
its own into the diagnosis.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from clusterbench.args import clipped
from clusterbench.errors import UsageError
from clusterbench.flight import unpickle
from clusterbench.inputs import documents, files
from clusterbench.launchers import MAX_WORLD_SIZE

# torch's dump of its default 2,000 entries, each with a 30-frame stack, is 1.4 MiB (measured, torch 2.13);
# 20,000 entries 14 MiB. Past this a file is not a dump, and JSON of this size builds at most ~0.7 GiB.
DUMP_LIMIT = 32 * files.MIB
# torch keeps 2,000 entries by default (TORCH_FR_BUFFER_SIZE, formerly TORCH_NCCL_TRACE_BUFFER_SIZE), users
# who raise it pick 20,000: five times that is no buffer anyone runs.
MAX_ENTRIES = 100_000
# What a folder may hold in all, each entry kept as some 300 bytes: 1,000 ranks of torch's default buffer,
# or 7,800 ranks of clusterbench's own (flight/record.py), in well under a GiB.
MAX_FOLDER_ENTRIES = 2_000_000
MAX_RANKS = MAX_WORLD_SIZE  # the largest job clusterbench runs or reads (launchers.py)
_MAX_DIGITS = 18  # a rank written with more is past any bound, and past what a 64-bit id holds
_MAX_TEXT = 256  # the longest group, op or dtype name printed; torch's are a few dozen characters
UNREAD = frozenset({"frames"})  # each entry's stack: most of a dump's bytes, and nothing the analysis reads
NAME = re.compile(r"^(?P<head>.*?)(?P<rank>\d+)(?:\.(?:json|pkl|pickle))?$")
_VERSION = re.compile(r"^(\d+)\.(\d+)$")
NEWEST_MAJOR = 2
_HOST = re.compile(r"^(?=.*[A-Za-z])[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$")  # RFC 1123, a letter somewhere
_HOSTNAME = re.compile(r"[!-~]{1,253}")  # what a recorded hostname may be: printable, no space, DNS's length
_RANK_LIST = re.compile(r"\[\s*(?:\d+\s*(?:,\s*\d+\s*)*)?\]")  # pg_config's "[0, 1, 2]"
_NUMBERS = re.compile(r"\d+")


@dataclass(frozen=True, slots=True)  # slots: a folder keeps up to MAX_FOLDER_ENTRIES of them
class Entry:
    """One op a rank enqueued, as its Flight Recorder kept it."""

    pg: str  # the process group's name, the same on every rank
    pg_desc: str
    seq: int  # collective_seq_id: the n-th collective of this group on this rank
    p2p_seq: int
    is_p2p: bool
    backend: str  # "nccl", "gloo" ...: the prefix of torch's profiling name
    op: str  # "all_reduce", "send" ...
    peers: str  # a point-to-point op's "1->2" or "3<-0" (group ranks), else ""
    input_sizes: tuple[tuple[int, ...], ...] | None  # None where the format did not record them
    input_dtypes: tuple[str, ...] | None
    output_sizes: tuple[tuple[int, ...], ...] | None
    output_dtypes: tuple[str, ...] | None
    state: str  # "scheduled", "started" or "completed"
    retired: bool
    created_ns: int | None = None  # time_created_ns: when the rank enqueued it, by its host's clock
    timeout_ms: int | None = None

    @property
    def done(self) -> bool:
        """Completed. NCCL marks an op completed when its end event fires, and retires one that timed out
        without completing it; Gloo records no events, its state stays "scheduled", and it retires an op
        when the op has finished."""
        return self.state == "completed" or (self.retired and self.backend == "gloo")


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


def _fail(path: Path, why: str) -> UsageError:
    return UsageError(f"{path}: not a Flight Recorder dump ({why})")


def _text(value: Any, path: Path, where: str, pool: dict[Any, Any]) -> str:
    """`value` when it is printable text of at most _MAX_TEXT characters, shared with its equals in `pool`."""
    if not isinstance(value, str) or len(value) > _MAX_TEXT or not value.isprintable():
        raise _fail(path, f"{where} is not a name of at most {_MAX_TEXT} printable characters")
    return pool.setdefault(value, value)


def _sizes(value: Any, path: Path, where: str, pool: dict[Any, Any]) -> tuple[tuple[int, ...], ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(s, list) and all(documents.whole_number(d) for d in s)
                                              for s in value):
        raise _fail(path, f"{where} is not a list of tensor shapes")
    shapes = tuple(tuple(s) for s in value)
    return pool.setdefault(shapes, shapes)


def _dtypes(value: Any, path: Path, where: str, pool: dict[Any, Any]) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _fail(path, f"{where} is not a list of dtype names")
    names = tuple(_text(d, path, f"{where}'s dtype", pool) for d in value)
    return pool.setdefault(names, names)


def _group(raw: dict[str, Any], path: Path, where: str, pool: dict[Any, Any]) -> tuple[str, str]:
    """The entry's process group: its name and description."""
    group = raw.get("process_group")
    if isinstance(group, list) and len(group) == 2 and all(isinstance(g, str) for g in group):
        return _text(group[0], path, f"{where}'s group", pool), _text(group[1], path, f"{where}'s group", pool)
    if documents.whole_number(raw.get("pg_id")):
        return str(raw["pg_id"]), ""
    raise _fail(path, f"{where} names no process group")


def _optional_whole(value: Any) -> int | None:
    return value if documents.whole_number(value) and value >= 0 else None


def _entry(raw: Any, path: Path, i: int, pool: dict[Any, Any]) -> Entry:
    where = f"entry {i}"
    if not isinstance(raw, dict):
        raise _fail(path, f"{where} is not a record")
    name = raw.get("profiling_name")
    if not isinstance(name, str) or ":" not in name:
        raise _fail(path, f"{where} has no profiling_name such as nccl:all_reduce")
    backend, _, call = _text(name, path, f"{where}'s profiling_name", pool).partition(":")
    op, _, peers = call.partition(" ")
    seq = raw.get("collective_seq_id", raw.get("seq_id"))
    p2p_seq = raw.get("p2p_seq_id", 0)
    if not documents.whole_number(seq) or not documents.whole_number(p2p_seq):
        raise _fail(path, f"{where} has no whole collective_seq_id / p2p_seq_id")
    pg, desc = _group(raw, path, where, pool)
    is_p2p = raw.get("is_p2p", op in ("send", "recv"))
    state, retired = raw.get("state", "scheduled"), raw.get("retired", False)
    if not isinstance(is_p2p, bool) or not isinstance(retired, bool) or not isinstance(state, str):
        raise _fail(path, f"{where} has an is_p2p, retired or state of the wrong kind")
    return Entry(pg=pg, pg_desc=desc, seq=seq, p2p_seq=p2p_seq, is_p2p=is_p2p,
                 backend=pool.setdefault(backend, backend), op=pool.setdefault(op, op), peers=peers.strip(),
                 state=_text(state, path, f"{where}'s state", pool), retired=retired,
                 created_ns=_optional_whole(raw.get("time_created_ns")),
                 timeout_ms=_optional_whole(raw.get("timeout_ms")),
                 input_sizes=_sizes(raw.get("input_sizes"), path, f"{where}'s input_sizes", pool),
                 input_dtypes=_dtypes(raw.get("input_dtypes"), path, f"{where}'s input_dtypes", pool),
                 output_sizes=_sizes(raw.get("output_sizes"), path, f"{where}'s output_sizes", pool),
                 output_dtypes=_dtypes(raw.get("output_dtypes"), path, f"{where}'s output_dtypes", pool))


def _listed_ranks(ranks: Any, path: Path, name: str) -> tuple[int, ...]:
    """A group's ranks as pg_config lists them ("[0, 1, 2]" as text in the pickle, a list in some JSON);
    empty where it lists none or in another form. A rank past any job is damage."""
    if isinstance(ranks, str):
        ranks = [] if _RANK_LIST.fullmatch(ranks.strip()) is None else _NUMBERS.findall(ranks)
        if any(len(r.lstrip("0")) > _MAX_DIGITS for r in ranks):  # int() is never asked for thousands of digits
            raise _fail(path, f"pg_config lists a rank of {len(max(ranks, key=len))} digits in group {name!r}")
        ranks = [int(r) for r in ranks]
    if not isinstance(ranks, list) or not all(documents.whole_number(r) for r in ranks):
        return ()
    if any(not 0 <= r < MAX_RANKS for r in ranks):
        raise _fail(path, f"pg_config lists rank {max(ranks, key=abs)} in group {name!r}; ranks are 0 to "
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


def _document(data: bytes, path: Path) -> Any:
    """The plain data of a dump's bytes, torch's pickle or its JSON, within unpickle's bounds and MAX_ENTRIES."""
    kind = _sniff(data)
    if not data.strip():
        raise _fail(path, "the file is empty: a dump still being written, or one that failed")
    if kind is None:
        raise _fail(path, "neither a pickle nor JSON")

    def admit(doc: Any) -> None:
        entries = doc.get("entries") if isinstance(doc, dict) else None
        if isinstance(entries, (list, tuple)) and len(entries) > MAX_ENTRIES:
            raise _fail(path, f"{len(entries)} entries, more than the {MAX_ENTRIES} any Flight Recorder buffer "
                              "keeps; torch's default is 2,000")

    if kind == "pickle":
        return unpickle.loads(data, str(path), UNREAD, admit)
    try:
        doc = documents.parse_json(data.decode("utf-8"), str(path))
    except UnicodeDecodeError as e:
        raise _fail(path, f"not UTF-8 text at byte {e.start}") from None
    admit(doc)
    return doc


def _version(doc: Any, path: Path) -> str:
    if not isinstance(doc, dict) or "version" not in doc:
        raise _fail(path, "no format version in it")
    version = doc["version"]
    match = _VERSION.match(version) if isinstance(version, str) else None
    if match is None:
        raise _fail(path, f"version {version!r} is not a Flight Recorder format version such as 2.10")
    if int(match.group(1)) > NEWEST_MAJOR:
        raise UsageError(f"{path}: Flight Recorder format {version}; this clusterbench reads formats "
                         f"{NEWEST_MAJOR}.x: upgrade clusterbench to read it")
    return version


def _host(doc: dict[str, Any], path: Path) -> str | None:
    host = doc.get("hostname")
    if host is None:
        return None
    if not isinstance(host, str) or not _HOSTNAME.fullmatch(host):
        raise _fail(path, "its hostname is not a host name (printable, no spaces, at most 253 characters)")
    return host


def _library(doc: dict[str, Any], path: Path, pool: dict[Any, Any]) -> str:
    """The communication library's version: comm_lib_version (format 2.10 on), nccl_version before."""
    value = doc.get("comm_lib_version", doc.get("nccl_version", ""))
    return _text(value, path, "its comm_lib_version", pool) if value else ""


def parse(data: bytes, path: Path, rank: int) -> Dump:
    """One rank's dump from its bytes: torch's pickle or its JSON."""
    doc = _document(data, path)
    version = _version(doc, path)
    entries = doc.get("entries")
    if not isinstance(entries, list):
        raise _fail(path, "no entries list: dumped without its collectives (includeCollectives=False)?")
    own = doc.get("rank")
    if own is not None and own != rank:
        said = f"rank {own}" if documents.whole_number(own) else "a rank that is not a number"
        raise UsageError(f"{path}: the dump says {said} but its name says rank {rank}")
    pool: dict[Any, Any] = {}
    return Dump(path=path, rank=rank, version=version, host=_host(doc, path),
                entries=tuple(_entry(e, path, i, pool) for i, e in enumerate(entries)),
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


def _newest(rank: int, paths: list[Path], notes: list[str]) -> Dump:
    """The newest of a rank's dumps, every one of them read (each file so named must be a dump)."""
    paths = sorted(paths, key=lambda p: (os.stat(p).st_mtime_ns, p.name))
    for p in paths[:-1]:
        parse(files.read_bytes(p, str(p), DUMP_LIMIT), p, rank)
    if len(paths) > 1:
        notes.append(f"rank {rank}: {len(paths)} dumps; the newest, {paths[-1].name}, is read "
                     f"({', '.join(p.name for p in paths[:-1])} left out)")
    return parse(files.read_bytes(paths[-1], str(paths[-1]), DUMP_LIMIT), paths[-1], rank)


def read_folder(folder: Path) -> Folder:
    """Every rank's newest dump in `folder`, with notes on what was left out; a one-line UsageError for
    a folder with none, a file named like a dump that is not one, or more entries than MAX_FOLDER_ENTRIES."""
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
    dumps, heads, kept = [], {}, 0
    for rank in sorted(by_rank):
        dumps.append(_newest(rank, by_rank[rank], notes))
        heads[rank] = NAME.match(dumps[-1].path.name).group("head")
        kept += len(dumps[-1].entries)
        if kept > MAX_FOLDER_ENTRIES:
            raise UsageError(f"{folder}: more than {MAX_FOLDER_ENTRIES} entries in its dumps, as far as rank {rank}: "
                             "more than clusterbench holds at once; diagnose a folder of fewer ranks' dumps")
    named_hosts = hosts_from_names(heads)
    dumps = [d if d.host or d.rank not in named_hosts else replace(d, host=named_hosts[d.rank]) for d in dumps]
    return Folder(dumps=dumps, notes=notes)
