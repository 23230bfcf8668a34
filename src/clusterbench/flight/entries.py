"""One entry of a Flight Recorder dump, read from what pickle or JSON built, whatever objects it holds: each
field the analysis uses is checked as it is read, and nothing else of the entry is copied or walked (entries are
most of a dump). Names and shapes are shared with their equals in a folder's pool, and a list that a pickle's memo
hands to many entries is read once, so what references cost stays what the bytes that name them cost."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterbench.errors import UsageError
from clusterbench.inputs import documents

MAX_TEXT = 256  # the longest group, op or dtype name printed; torch's are a few dozen characters


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


def refused(path: Path, why: str) -> UsageError:
    return UsageError(f"{path}: not a Flight Recorder dump ({why})")


class Bad(Exception):
    """A value of a dump that is not what torch writes there: what it is, for the one line naming the file."""


def named(value: Any, pool: dict[Any, Any], what: str) -> str:
    """`value` as a name of at most MAX_TEXT printable characters, shared with its equals in `pool`; Bad where
    it is none."""
    found = pool.get(value) if type(value) is str else None  # checked when it was pooled: a dump repeats a few
    if found is None:
        if not isinstance(value, str) or len(value) > MAX_TEXT or not value.isprintable():
            raise Bad(f"{what} is not a name of at most {MAX_TEXT} printable characters")
        found = pool.setdefault(value, value)
    return found


def _whole(value: Any) -> bool:
    """A whole number a document may hold (within 64 bits): what check_tree makes sure of elsewhere."""
    return type(value) is int and -documents.INT_LIMIT <= value < documents.INT_LIMIT


# A list of more items than this is read once however many entries name it (a memo reference may hand one
# list to every entry): what references cost stays what the bytes that name them cost.
_SHORT = 8
_MAX_DIMS = 64  # torch's tensors have at most 25 dimensions; a shape of more is no tensor's


class Shared(tuple):  # type: ignore[type-arg]
    """An entry's shapes or dtype names, one object for all equal ones of a folder (its pool), its hash computed
    once: the analysis compares each entry's by hash and identity, so a list of a million shapes named by every
    entry costs its reading once, not once per entry."""

    def __hash__(self) -> int:
        found = self.__dict__.get("hash")
        if found is None:
            found = self.__dict__["hash"] = tuple.__hash__(self)
        return found


def _shapes(value: Any, pool: dict[Any, Any], seen: dict[int, Any], what: str) -> Any:
    """A list of tensor shapes (what=...sizes) or of dtype names (...dtypes), as a tuple shared with its
    equals in `pool`; None where the format did not record it."""
    if value is None:
        return None
    if type(value) is not list and type(value) is not tuple:
        raise Bad(f"{what} is not a list")
    if len(value) > _SHORT and id(value) in seen:
        return seen[id(value)][0]
    if what.endswith("dtypes"):
        found = tuple(named(d, pool, f"{what}' dtype") for d in value)
    else:
        found = tuple(tuple(s) if (type(s) is list or type(s) is tuple) and len(s) <= _MAX_DIMS else None
                      for s in value)
        if None in found or not all(_whole(d) for shape in found for d in shape):
            raise Bad(f"{what} is not a list of tensor shapes (of at most {_MAX_DIMS} dimensions)")
    pooled = pool.get(found)
    found = pooled if pooled is not None else pool.setdefault(found, Shared(found))
    if len(value) > _SHORT:
        seen[id(value)] = (found, value)  # the value kept with it: its id stays its own
    return found


def _group(raw: dict[Any, Any], pool: dict[Any, Any]) -> tuple[str, str]:
    """The entry's process group: its name and description."""
    group = raw.get("process_group")
    if (type(group) is list or type(group) is tuple) and len(group) == 2:
        return named(group[0], pool, "'s group"), named(group[1], pool, "'s group")
    if _whole(raw.get("pg_id")):
        return str(raw["pg_id"]), ""
    raise Bad(" names no process group")


def _optional_whole(value: Any) -> int | None:
    return value if _whole(value) and value >= 0 else None


def read(raw: Any, path: Path, i: int, pool: dict[Any, Any], seen: dict[int, Any]) -> Entry:
    """Entry `i` as pickle or JSON built it, whatever objects it holds: each field read is checked here
    (entries are most of a dump, and are never copied or walked whole)."""
    if id(raw) in seen:  # the same record named again by a memo reference: read once
        return seen[id(raw)][0]
    try:
        entry = _read_entry(raw, pool, seen)
    except Bad as e:
        raise refused(path, f"entry {i}{e}") from None
    seen[id(raw)] = (entry, raw)
    return entry


def _read_entry(raw: Any, pool: dict[Any, Any], seen: dict[int, Any]) -> Entry:
    if not isinstance(raw, dict):
        raise Bad(f" is {documents.json_name(raw)}, not a record")
    name = raw.get("profiling_name")
    if not isinstance(name, str) or ":" not in name:
        raise Bad(" has no profiling_name such as nccl:all_reduce")
    backend, _, call = named(name, pool, "'s profiling_name").partition(":")
    op, _, peers = call.partition(" ")
    seq = raw.get("collective_seq_id", raw.get("seq_id"))
    p2p_seq = raw.get("p2p_seq_id", 0)
    if not _whole(seq) or not _whole(p2p_seq):
        raise Bad(" has no whole collective_seq_id / p2p_seq_id")
    pg, desc = _group(raw, pool)
    is_p2p = raw.get("is_p2p", op in ("send", "recv"))
    state, retired = raw.get("state", "scheduled"), raw.get("retired", False)
    if type(is_p2p) is not bool or type(retired) is not bool or not isinstance(state, str):
        raise Bad(" has an is_p2p, retired or state of the wrong kind")
    return Entry(pg=pg, pg_desc=desc, seq=seq, p2p_seq=p2p_seq, is_p2p=is_p2p,
                 backend=pool.setdefault(backend, backend), op=pool.setdefault(op, op), peers=peers.strip(),
                 state=named(state, pool, "'s state"), retired=retired,
                 created_ns=_optional_whole(raw.get("time_created_ns")),
                 timeout_ms=_optional_whole(raw.get("timeout_ms")),
                 input_sizes=_shapes(raw.get("input_sizes"), pool, seen, "'s input_sizes"),
                 input_dtypes=_shapes(raw.get("input_dtypes"), pool, seen, "'s input_dtypes"),
                 output_sizes=_shapes(raw.get("output_sizes"), pool, seen, "'s output_sizes"),
                 output_dtypes=_shapes(raw.get("output_dtypes"), pool, seen, "'s output_dtypes"))


