"""Which rank, which collective: the rules that turn every rank's Flight Recorder entries into a culprit.

Every rank numbers the collectives of a process group 1, 2, 3 ... in the order it enters them
(collective_seq_id), and a collective completes on no rank until every member has entered it (a
broadcast's root aside). So, per process group:

* a rank's frontier is the lowest sequence number it entered and has not completed, else the one
  after its last (a rank whose buffer dropped its oldest entries has passed them);
* the group is stuck in the lowest frontier of its members, k. The members that entered k and did not
  complete it wait in it; a member whose last entry is below k, that has no entry of the group, or
  that left no dump, never entered it: that rank is the culprit, whatever it waits in instead (its
  pending op in another group is named, the usual cross-group deadlock);
* where all members wait in k, none is missing: the collective itself hangs (the network, a device),
  unless the members disagree on it;
* at each sequence number two or more ranks recorded, the ranks must agree on the op, its dtypes and,
  for ops whose shapes are the same on every rank, the shapes. The first disagreement is named, the
  ranks grouped by what they called, the minority against the majority; later ones follow from it;
* point-to-point ops are numbered per pair, not per group: a pending send from a to b needs a pending
  recv from a on b, and the other way round; one without its partner is named.

Members come from the dump's pg_config where the backend records them (NCCL does; Gloo only for
the default group); else the default group is every rank up to the highest that dumped, and another
group is the ranks that recorded it (a member that recorded nothing of it cannot be named).

Every rule reads a group's own entries, indexed once, so the work grows with the entries and the
members, not with their product: a folder of many groups is judged as fast as one of a few.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from clusterbench.flight.dumps import Dump, Entry
from clusterbench.units import ranks_text

# Ops whose shapes differ between ranks by design (uneven splits, a root's list): judged on op and dtype.
UNEVEN = frozenset({"all_to_all", "all_to_all_single", "all_to_all_v_single", "alltoall", "alltoall_base",
                    "all_gather_v", "reduce_scatter_v", "gather", "scatter", "coalesced"})
_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Long": "int64",
           "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool",
           "Float8_e4m3fn": "float8_e4m3fn", "Float8_e5m2": "float8_e5m2"}


@dataclass(frozen=True)
class Finding:
    kind: str  # "culprit", "mismatch", "p2p", "hang" (all entered, none completed), "healthy"
    text: str

    @property
    def fails(self) -> bool:
        return self.kind in ("culprit", "mismatch", "p2p")


def _dtype(name: str) -> str:
    return _DTYPES.get(name, name)


def _tensors(sizes: tuple[tuple[int, ...], ...] | None, dtypes: tuple[str, ...] | None) -> str:
    if sizes is None:
        return "not recorded"
    if not sizes:
        return "none"
    shown = [f"[{', '.join(map(str, s))}]" + (f" {_dtype(dtypes[i])}" if dtypes and i < len(dtypes) else "")
             for i, s in enumerate(sizes[:4])]
    return ", ".join(shown) + (f" and {len(sizes) - 4} more" if len(sizes) > 4 else "")


def describe(e: Entry) -> str:
    """The op with its tensors: "all_reduce, input [1048576] float32"; the output too where it differs."""
    text = f"{e.op}, input {_tensors(e.input_sizes, e.input_dtypes)}"
    if (e.output_sizes, e.output_dtypes) != (e.input_sizes, e.input_dtypes):
        text += f", output {_tensors(e.output_sizes, e.output_dtypes)}"
    return text


def group_name(e: Entry) -> str:
    return f"process group {e.pg}" + (f" ({e.pg_desc})" if e.pg_desc else "")


def _who(ranks: Sequence[int] | set[int], hosts: dict[int, str | None]) -> str:
    named = set(ranks) & hosts.keys()
    known = sorted({hosts[r] for r in named if hosts[r]})
    return ranks_text(ranks) + (f" (on {', '.join(known)})" if known else "")


@dataclass(frozen=True)
class _Index:
    """The dumps with each group's entries by rank, and each rank's first two pending ops of different
    groups: what every rule asks for, found once."""

    dumps: dict[int, Dump]
    hosts: dict[int, str | None]
    groups: dict[str, dict[int, list[Entry]]]  # group -> rank -> its entries of the group, oldest first
    listed: dict[str, tuple[int, ...]]  # group -> its ranks, from the first pg_config that lists them
    pending: dict[int, list[Entry]]  # rank -> its first pending op, and the first of another group after it


def _index(dumps: list[Dump]) -> _Index:
    groups: dict[str, dict[int, list[Entry]]] = {}
    listed: dict[str, tuple[int, ...]] = {}
    pending: dict[int, list[Entry]] = {}
    for d in dumps:
        for name, ranks in d.groups.items():
            listed.setdefault(name, ranks)
        waits = pending.setdefault(d.rank, [])
        for e in d.entries:
            groups.setdefault(e.pg, {}).setdefault(d.rank, []).append(e)
            if not e.done and len(waits) < 2 and (not waits or waits[0].pg != e.pg):
                waits.append(e)
    return _Index({d.rank: d for d in dumps}, {d.rank: d.host for d in dumps}, groups, listed, pending)


def _members(pg: str, first: Entry, index: _Index) -> Sequence[int]:
    if pg in index.listed:
        return sorted(index.listed[pg])
    if first.pg_desc == "default_pg" or pg == "0":
        return range(max(index.dumps) + 1)
    return sorted(index.groups[pg])


def _signature(entries: list[Entry]) -> tuple:
    return tuple((e.op, e.input_dtypes, e.output_dtypes) if e.op in UNEVEN else
                 (e.op, e.input_sizes, e.input_dtypes, e.output_sizes, e.output_dtypes) for e in entries)


def _pending_elsewhere(index: _Index, rank: int, pg: str) -> str:
    """What a rank that never entered waits in instead, in another group, if anything."""
    other = [e for e in index.pending.get(rank, []) if e.pg != pg]
    if not other:
        return ""
    e = other[0]
    number = f"p2p #{e.p2p_seq}" if e.is_p2p else f"#{e.seq}"
    return f"; it waits in {e.op} {number} of {group_name(e)} instead"


def _mismatch(pg: str, seqs: dict[int, dict[int, list[Entry]]], hosts: dict[int, str | None]) -> Finding | None:
    bad = [k for k in sorted(seqs) if len(seqs[k]) > 1 and len({_signature(v) for v in seqs[k].values()}) > 1]
    if not bad:
        return None
    k = bad[0]
    kinds: dict[tuple, list[int]] = {}
    for rank, entries in sorted(seqs[k].items()):
        kinds.setdefault(_signature(entries), []).append(rank)
    ordered = sorted(kinds.items(), key=lambda kv: -len(kv[1]))
    calls = {sig: "; ".join(describe(e) for e in seqs[k][ranks[0]]) for sig, ranks in ordered}
    first = seqs[k][ordered[0][1][0]][0]
    where = f"#{k} of {group_name(first)}"
    later = f" ({len(bad) - 1} later sequence numbers disagree too)" if len(bad) > 1 else ""
    if len(ordered[0][1]) > len(ordered[1][1]):
        (major, majority), minority = ordered[0], ordered[1:]
        text = "; ".join(f"{_who(ranks, hosts)} called {calls[sig]} at {where}" for sig, ranks in minority)
        return Finding("mismatch", f"{text}, where {_who(majority, hosts)} called {calls[major]}{later}")
    return Finding("mismatch", f"ranks disagree at {where}: "
                   + "; ".join(f"{_who(ranks, hosts)} called {calls[sig]}" for sig, ranks in ordered) + later)


def _collectives(pg: str, members: Sequence[int], index: _Index) -> list[Finding]:
    dumps, hosts, recorded = index.dumps, index.hosts, index.groups[pg]
    seqs: dict[int, dict[int, list[Entry]]] = {}  # seq -> rank -> its entries at seq (several when coalesced)
    belongs = members if isinstance(members, range) else set(members)
    mine = {r: [e for e in entries if not e.is_p2p] for r, entries in recorded.items() if r in belongs}
    for r, entries in mine.items():
        for e in entries:
            seqs.setdefault(e.seq, {}).setdefault(r, []).append(e)
    # A collective that completed on one member was entered by all: where another's entry of it still
    # reads pending, its record lagged (Gloo retires an op when its work object is next looked at), and
    # the group is not stuck there.
    ended = {seq for seq, by_rank in seqs.items() if any(all(e.done for e in es) for es in by_rank.values())}
    frontier: dict[int, int] = {}
    last: dict[int, int] = {}
    for r, entries in mine.items():
        if entries:
            last[r] = max(e.seq for e in entries)
            pending = [e.seq for e in entries if not e.done and e.seq not in ended]
            frontier[r] = min(pending) if pending else last[r] + 1
    if not frontier:
        return []
    mismatch = _mismatch(pg, seqs, hosts)
    found = [mismatch] if mismatch else []
    k = min(frontier.values())
    at_k = seqs.get(k, {})
    never = sorted(r for r in members if r not in last or last[r] < k)
    newest = next(iter(seqs[max(seqs)].values()))[0]
    if not at_k:  # nobody recorded k: every rank that recorded the group completed all it recorded
        unrecorded = [r for r in members if r not in last]
        if not unrecorded:
            return found + [Finding("healthy", f"{group_name(newest)}: every rank completed the collectives "
                                               f"it recorded, up to #{max(seqs)}")]
        silent = [r for r in unrecorded if r not in dumps]
        quiet = [r for r in unrecorded if r in dumps]
        whom = "; ".join(([f"{_who(quiet, hosts)} recorded none of its collectives"] if quiet else [])
                         + ([f"{_who(silent, hosts)} left no dump"] if silent else []))
        return found + [Finding("culprit", f"{group_name(newest)}: {whom}, while {_who(list(last), hosts)} "
                                           f"completed up to #{max(seqs)}")]
    waiting = sorted(r for r, es in at_k.items() if not all(e.done for e in es))
    completed = sorted(r for r, es in at_k.items() if all(e.done for e in es))
    sample = next(iter(at_k.values()))[0]
    what = f"{sample.op} #{k} of {group_name(sample)}"
    if never:
        # No rank completes a collective another never entered: Gloo retires one that failed or timed out
        # as it retires one that finished, so a "completed" entry here is a rank that gave up.
        others = ([f"{_who(waiting, hosts)} {'waits' if len(waiting) == 1 else 'wait'} in it"] if waiting else []) + \
                 ([f"{_who(completed, hosts)} entered it and gave up"] if completed else [])
        tail = "; ".join(others)
        for r in never:
            if r not in dumps:
                continue
            before = f"its last in this group: #{last[r]}" if r in last else "no entry of this group in its dump"
            found.append(Finding("culprit", f"{_who([r], hosts)} never entered {what}, input "
                                 f"{_tensors(sample.input_sizes, sample.input_dtypes)}; {tail} "
                                 f"({before}{_pending_elsewhere(index, r, pg)})"))
        silent = [r for r in never if r not in dumps]
        if silent:
            found.append(Finding("culprit", f"{_who(silent, hosts)} left no dump, so whether it entered {what} is "
                                 f"unknown; {tail}: a rank that died or was killed writes none"))
    elif waiting and mismatch is None:
        everyone = len(waiting) == len(members)
        found.append(Finding("hang", f"{'all ' if everyone else ''}{_who(waiting, hosts)} entered {what} "
                             f"({describe(sample)}) and did not complete it"
                             + (": no rank is missing from it; the collective itself hangs (network, device: "
                                "read NCCL's log with clusterbench diagnose)" if everyone else "")))
    return found


def _p2p(pg: str, members: Sequence[int], index: _Index) -> list[Finding]:
    """Pending sends and recvs per (source, destination), in global ranks where the members are known."""
    def glob(local: int) -> int:
        return members[local] if 0 <= local < len(members) else local

    dumps, hosts = index.dumps, index.hosts
    sends: Counter[tuple[int, int]] = Counter()
    recvs: Counter[tuple[int, int]] = Counter()
    first: dict[tuple[str, int, int], Entry] = {}
    for r, entries in index.groups[pg].items():
        for e in entries:
            if not e.is_p2p or e.done or e.op not in ("send", "recv"):
                continue
            sep = "->" if e.op == "send" else "<-"
            a, _, b = e.peers.partition(sep)
            if not (a.strip().isdigit() and b.strip().isdigit()):
                continue
            peer = glob(int(b))
            pair = (r, peer) if e.op == "send" else (peer, r)
            (sends if e.op == "send" else recvs)[pair] += 1
            first.setdefault((e.op, *pair), e)
    found = []
    for (src, dst), n in sorted(sends.items()):
        if n > recvs[(src, dst)] and dst in dumps:
            e = first[("send", src, dst)]
            found.append(Finding("p2p", f"{_who([src], hosts)} waits in send p2p #{e.p2p_seq} to rank {dst} of "
                                 f"{group_name(e)} ({describe(e)}); rank {dst} posted no matching recv"))
    for (src, dst), n in sorted(recvs.items()):
        if n > sends[(src, dst)] and src in dumps:
            e = first[("recv", src, dst)]
            found.append(Finding("p2p", f"{_who([dst], hosts)} waits in recv p2p #{e.p2p_seq} from rank {src} of "
                                 f"{group_name(e)} ({describe(e)}); rank {src} posted no matching send"))
    return found


def analyse(dumps: list[Dump]) -> list[Finding]:
    """Every process group's findings, groups in the order of their names."""
    index = _index(dumps)
    found: list[Finding] = []
    for pg in sorted(index.groups, key=lambda name: (not name.isdigit(), int(name) if name.isdigit() else 0, name)):
        first = next(iter(index.groups[pg].values()))[0]
        members = _members(pg, first, index)
        found += _collectives(pg, members, index) + _p2p(pg, members, index)
    return found
