"""Whether a folder's Flight Recorder dumps are one job's. Torch's format names no job, so a mix shows in
what every rank of one job shares (docs/methodology.md, "Reading the dumps"); a diagnosis of dumps of
several jobs would describe none of them.
"""

from __future__ import annotations

from typing import Any

from clusterbench.flight.dumps import Dump

DEFAULT_TIMEOUT_MS = 30 * 60 * 1000  # torch's default collective timeout, where an entry states none
# How far one job's records of one collective may lie apart beyond its timeout: hosts' clocks (NTP keeps
# them within milliseconds) and a watchdog that lets a late collective finish. Stale dumps of another
# job are hours or days apart.
CLOCK_SLACK_NS = 3600 * 10**9


def mixed(dumps: list[Dump]) -> str | None:
    """Why `dumps` cannot all be one job's, or None. Torch's format names no job: what gives a mix away is
    what every rank of one job shares, its torch and library versions, its groups' descriptions and
    members, one default group holding every rank, and its collectives' times, which each member's
    clock records within the collective's timeout of the others (a collective completes on no rank
    before every member entered it, and a member waits no longer than its timeout)."""
    for check in (_versions, _libraries, _descriptions, _memberships, _outside_default, _times):
        why = check(dumps)
        if why:
            return why
    return None


def _disagree(dumps: list[Dump], what: str, value: Any) -> str | None:
    """Where two dumps state `value` (a function of a dump; "" for not stated) differently."""
    stated = [d for d in dumps if value(d)]
    other = next((d for d in stated if value(d) != value(stated[0])), None)
    return None if other is None else (f"rank {stated[0].rank}'s dump is of {what} {value(stated[0])}, "
                                       f"rank {other.rank}'s of {value(other)}")


def _versions(dumps: list[Dump]) -> str | None:
    return _disagree(dumps, "Flight Recorder format", lambda d: d.version)


def _libraries(dumps: list[Dump]) -> str | None:
    return _disagree(dumps, "communication library", lambda d: d.library)


def _descriptions(dumps: list[Dump]) -> str | None:
    seen: dict[str, tuple[str, int]] = {}
    default: tuple[str, int] | None = None
    for d in dumps:
        for e in d.entries:
            desc, rank = seen.setdefault(e.pg, (e.pg_desc, d.rank))
            if desc != e.pg_desc:
                return (f"process group {e.pg} is {desc!r} in rank {rank}'s dump but {e.pg_desc!r} in rank "
                        f"{d.rank}'s")
            if e.pg_desc == "default_pg":
                default = default or (e.pg, d.rank)
                if default[0] != e.pg:
                    return (f"rank {default[1]}'s default group is process group {default[0]}, rank {d.rank}'s "
                            f"process group {e.pg}: a job has one")
    return None


def _memberships(dumps: list[Dump]) -> str | None:
    seen: dict[str, tuple[tuple[int, ...], int]] = {}
    for d in dumps:
        for name, ranks in d.groups.items():
            if not name:  # Gloo's one nameless pg_config entry lists the world or nothing, as it goes
                continue
            listed, rank = seen.setdefault(name, (ranks, d.rank))
            differ = set(listed) ^ set(ranks)
            if differ:
                odd = min(differ)
                holds, lacks = (rank, d.rank) if odd in listed else (d.rank, rank)
                return f"process group {name} holds rank {odd} in rank {holds}'s dump, not in rank {lacks}'s"
    return None


def _outside_default(dumps: list[Dump]) -> str | None:
    lister = next((d for d in dumps if "0" in d.groups), None)
    if lister is None:
        return None
    world = set(lister.groups["0"])
    stray = next((d for d in dumps if d.rank not in world), None)
    return None if stray is None else (f"rank {stray.rank} left a dump, but rank {lister.rank}'s lists process "
                                       f"group 0, the whole job, as {len(world)} ranks without it")


def _times(dumps: list[Dump]) -> str | None:
    """A completed collective whose members' records of it were made further apart than it could wait."""
    earliest: dict[tuple[str, int], tuple[int, int]] = {}  # (group, seq) -> (time, rank)
    latest: dict[tuple[str, int], tuple[int, int]] = {}
    waits: dict[tuple[str, int], int] = {}
    completed: set[tuple[str, int]] = set()
    for d in dumps:
        for e in d.entries:
            if e.is_p2p or e.created_ns is None:
                continue
            key = (e.pg, e.seq)
            earliest[key] = min(earliest.get(key, (e.created_ns, d.rank)), (e.created_ns, d.rank))
            latest[key] = max(latest.get(key, (e.created_ns, d.rank)), (e.created_ns, d.rank))
            waits[key] = max(waits.get(key, 0), e.timeout_ms or DEFAULT_TIMEOUT_MS)
            if e.state == "completed":
                completed.add(key)
    for key in sorted(completed):
        (first, early), (last, late) = earliest[key], latest[key]
        if early != late and last - first > waits[key] * 10**6 + CLOCK_SLACK_NS:
            return (f"rank {early} and rank {late} record collective #{key[1]} of process group {key[0]}, which "
                    f"completed, {(last - first) / 3.6e12:.1f} h apart: longer than its {waits[key] / 60e3:g} min "
                    "timeout lets one collective wait")
    return None
