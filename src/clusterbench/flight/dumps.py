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
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterbench.errors import UsageError
from clusterbench.flight import unpickle
from clusterbench.inputs import documents, files

# A dump with stack traces of 2,000 entries is a few MiB; a buffer of 20,000 stays well inside this.
DUMP_LIMIT = files.DOCUMENT_LIMIT
UNREAD = frozenset({"frames"})  # each entry's stack: most of a dump's bytes, and nothing the analysis reads
NAME = re.compile(r"^(?P<head>.*?)(?P<rank>\d+)(?:\.(?:json|pkl|pickle))?$")
_VERSION = re.compile(r"^(\d+)\.(\d+)$")
NEWEST_MAJOR = 2
_HOST = re.compile(r"^(?=.*[A-Za-z])[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$")  # RFC 1123, a letter somewhere
_NUMBERS = re.compile(r"-?\d+")


@dataclass(frozen=True)
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


def _sizes(value: Any, path: Path, where: str) -> tuple[tuple[int, ...], ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(s, list) and all(documents.whole_number(d) for d in s)
                                              for s in value):
        raise _fail(path, f"{where} is not a list of tensor shapes")
    return tuple(tuple(s) for s in value)


def _dtypes(value: Any, path: Path, where: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(d, str) for d in value):
        raise _fail(path, f"{where} is not a list of dtype names")
    return tuple(value)


def _entry(raw: Any, path: Path, i: int) -> Entry:
    where = f"entry {i}"
    if not isinstance(raw, dict):
        raise _fail(path, f"{where} is not a record")
    name = raw.get("profiling_name")
    if not isinstance(name, str) or ":" not in name:
        raise _fail(path, f"{where} has no profiling_name such as nccl:all_reduce")
    backend, _, call = name.partition(":")
    op, _, peers = call.partition(" ")
    seq = raw.get("collective_seq_id", raw.get("seq_id"))
    p2p_seq = raw.get("p2p_seq_id", 0)
    if not documents.whole_number(seq) or not documents.whole_number(p2p_seq):
        raise _fail(path, f"{where} has no whole collective_seq_id / p2p_seq_id")
    group = raw.get("process_group")
    if isinstance(group, list) and len(group) == 2 and all(isinstance(g, str) for g in group):
        pg, desc = group
    elif documents.whole_number(raw.get("pg_id")):
        pg, desc = str(raw["pg_id"]), ""
    else:
        raise _fail(path, f"{where} names no process group")
    is_p2p = raw.get("is_p2p", op in ("send", "recv"))
    state, retired = raw.get("state", "scheduled"), raw.get("retired", False)
    if not isinstance(is_p2p, bool) or not isinstance(retired, bool) or not isinstance(state, str):
        raise _fail(path, f"{where} has an is_p2p, retired or state of the wrong kind")
    return Entry(pg=pg, pg_desc=desc, seq=seq, p2p_seq=p2p_seq, is_p2p=is_p2p, backend=backend, op=op,
                 peers=peers.strip(), state=state, retired=retired,
                 input_sizes=_sizes(raw.get("input_sizes"), path, f"{where}'s input_sizes"),
                 input_dtypes=_dtypes(raw.get("input_dtypes"), path, f"{where}'s input_dtypes"),
                 output_sizes=_sizes(raw.get("output_sizes"), path, f"{where}'s output_sizes"),
                 output_dtypes=_dtypes(raw.get("output_dtypes"), path, f"{where}'s output_dtypes"))


def _groups(config: Any) -> dict[str, tuple[int, ...]]:
    """pg_config's ranks per group ("[0, 1, 2]" as text in the pickle, a list in some JSON): only groups
    that list some, since Gloo leaves a group's entry empty."""
    found: dict[str, tuple[int, ...]] = {}
    for name, conf in (config.items() if isinstance(config, dict) else ()):
        ranks = conf.get("ranks") if isinstance(conf, dict) else None
        if isinstance(ranks, str):
            ranks = [int(r) for r in _NUMBERS.findall(ranks)]
        if isinstance(ranks, list) and ranks and all(documents.whole_number(r) and r >= 0 for r in ranks):
            found[name] = tuple(ranks)
    return found


def parse(data: bytes, path: Path, rank: int) -> Dump:
    """One rank's dump from its bytes: torch's pickle or its JSON."""
    kind = _sniff(data)
    label = str(path)
    if not data.strip():
        raise _fail(path, "the file is empty: a dump still being written, or one that failed")
    if kind is None:
        raise _fail(path, "neither a pickle nor JSON")
    if kind == "pickle":
        doc = unpickle.loads(data, label, UNREAD)
    else:
        try:
            doc = documents.parse_json(data.decode("utf-8"), label)
        except UnicodeDecodeError as e:
            raise _fail(path, f"not UTF-8 text at byte {e.start}") from None
    if not isinstance(doc, dict) or "version" not in doc:
        raise _fail(path, "no format version in it")
    version = doc["version"]
    match = _VERSION.match(version) if isinstance(version, str) else None
    if match is None:
        raise _fail(path, f"version {version!r} is not a Flight Recorder format version such as 2.10")
    if int(match.group(1)) > NEWEST_MAJOR:
        raise UsageError(f"{path}: Flight Recorder format {version}; this clusterbench reads formats "
                         f"{NEWEST_MAJOR}.x: upgrade clusterbench to read it")
    if not isinstance(doc.get("entries"), list):
        raise _fail(path, "no entries list: dumped without its collectives (includeCollectives=False)?")
    own = doc.get("rank")
    if own is not None and own != rank:
        raise UsageError(f"{path}: the dump says rank {own} but its name says rank {rank}")
    host = doc.get("hostname") if isinstance(doc.get("hostname"), str) else None
    return Dump(path=path, rank=rank, version=version, host=host,
                entries=tuple(_entry(e, path, i) for i, e in enumerate(doc["entries"])),
                groups=_groups(doc.get("pg_config")))


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


def read_folder(folder: Path) -> Folder:
    """Every rank's newest dump in `folder`, with notes on what was left out; a one-line UsageError for
    a folder with none, or a file named like a dump that is not one."""
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
        by_rank.setdefault(int(NAME.match(path.name).group("rank")), []).append(path)
    dumps, heads = [], {}
    for rank in sorted(by_rank):
        paths = sorted(by_rank[rank], key=lambda p: (os.stat(p).st_mtime_ns, p.name))
        read = [parse(files.read_bytes(p, str(p), DUMP_LIMIT), p, rank) for p in paths]
        if len(paths) > 1:
            notes.append(f"rank {rank}: {len(paths)} dumps; the newest, {paths[-1].name}, is read "
                         f"({', '.join(p.name for p in paths[:-1])} left out)")
        dumps.append(read[-1])
        heads[rank] = NAME.match(paths[-1].name).group("head")
    named_hosts = hosts_from_names(heads)
    dumps = [d if d.host or d.rank not in named_hosts else
             Dump(d.path, d.rank, d.version, named_hosts[d.rank], d.entries, d.groups) for d in dumps]
    return Folder(dumps=dumps, notes=notes)
