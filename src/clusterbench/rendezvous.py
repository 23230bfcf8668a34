"""The job's meeting point: one TCPStore that every rank joins before the process group forms,
then a board where each rank leaves where it is and how it ended.

Joining through our own keys rather than inside init_process_group lets a rendezvous that
never completes name the hosts that came. The `at` and `end` keys let whoever is left (the
local supervisor, the Ray driver, or any surviving rank under an external launcher) say
which rank stopped where while the others waited; the `beat` keys, which every rank's process
counts up while it lives, tell a rank that died or stopped from one still waiting on it.
"""

from __future__ import annotations

import datetime
import json
import socket
import time
from dataclasses import asdict, dataclass, replace

import torch.distributed as dist

from clusterbench.args import clipped
from clusterbench.errors import RunFailed, UsageError
from clusterbench.units import ranks_text

POLL_S = 0.05


@dataclass(frozen=True)
class Member:
    """One rank as it introduced itself."""

    rank: int
    host: str
    local_rank: int
    node_index: str | None = None  # the launcher's, when it gives one
    node: str = ""  # set once all have joined: the host name, told apart by node_index where hosts share one


class Rendezvous:
    """The store and our keys in it, under `prefix` (the launcher's attempt, where a restarted job
    may meet in the same store as the attempt before it)."""

    def __init__(self, store: dist.Store, world_size: int, prefix: str = "clusterbench") -> None:
        self.store = dist.PrefixStore(prefix, store)
        self.world_size = world_size
        self.members: list[Member] = []  # once everyone has joined

    @classmethod
    def open(cls, addr: str, port: int, world_size: int, timeout_s: float, server: bool,
             prefix: str = "clusterbench") -> Rendezvous:
        """Host the store (server) or reach it; a store nobody hosts is one line after the timeout."""
        check_address(addr)
        try:
            store = dist.TCPStore(addr, port, None if server else world_size, is_master=server,
                                  timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False)
        except (RuntimeError, OSError) as e:
            if server:  # a port taken, or not ours to open: the setup's fault (MASTER_PORT's), not the run's
                raise UsageError(f"cannot open the rendezvous on port {port}: {str(e).splitlines()[0]}") from None
            raise RunFailed(f"the rendezvous at {addr}:{port} (rank 0's host) did not answer within "
                            f"{timeout_s:g} s: is rank 0 running, and MASTER_ADDR/MASTER_PORT right?") from None
        return cls(store, world_size, prefix)

    @property
    def port(self) -> int:
        return self.store.underlying_store.port

    def group_store(self) -> dist.Store:
        """Where the process group keeps its own keys."""
        return dist.PrefixStore("pg", self.store)

    def _key(self, kind: str, rank: int) -> str:
        return f"{kind}/{rank}"

    def join(self, me: Member, timeout_s: float) -> list[Member]:
        """Introduce this rank, wait for all others, and return everyone; name the absent on timeout."""
        deadline = time.monotonic() + timeout_s
        try:
            self.store.set(self._key("join", me.rank), json.dumps(asdict(me)))
            self.store.add("joined", 1)
            while self.store.add("joined", 0) < self.world_size:
                if time.monotonic() > deadline:
                    raise RunFailed(self._absent(timeout_s))
                time.sleep(POLL_S)
        except (RuntimeError, OSError):
            raise RunFailed(f"the rendezvous closed before all {self.world_size} ranks joined: rank 0 gave up "
                            "waiting (its own line names the ranks that never came)") from None
        keys = [self._key("join", r) for r in range(self.world_size)]
        self.members = named([Member(**json.loads(v)) for v in self.store.multi_get(keys)])
        return self.members

    def _absent(self, timeout_s: float) -> str:
        came = self._present("join")
        hosts: dict[str, list[int]] = {}
        for rank, text in came.items():
            hosts.setdefault(json.loads(text)["host"], []).append(rank)
        where = "; ".join(f"{node}: {ranks_text(ranks)}" for node, ranks in hosts.items())
        missing = [r for r in range(self.world_size) if r not in came]
        return (f"rendezvous incomplete after {timeout_s:g} s: {len(came)} of {self.world_size} ranks joined "
                f"({where}); {ranks_text(missing)} never came")

    def _present(self, kind: str) -> dict[int, str]:
        keys = {r: self._key(kind, r) for r in range(self.world_size)}
        return {r: self.store.get(k).decode() for r, k in keys.items() if self.store.check([k])}

    def at(self, rank: int, where: str) -> None:
        self.store.set(self._key("at", rank), where)

    def end(self, rank: int, kind: str, message: str) -> None:
        self.store.set(self._key("end", rank), json.dumps([kind, message]))
        self.store.add("ended", 1)

    def ended(self) -> int:
        """How many ranks have said how they ended: one request, however many ranks there are."""
        return self.store.add("ended", 0)

    def beat(self, rank: int) -> None:
        """One more sign of life of this rank's process (rank.py's heartbeat, while its work runs)."""
        self.store.add(self._key("beat", rank), 1)

    def beats(self) -> dict[int, int]:
        """Each rank's count of signs of life: one that stops counting has died or stopped."""
        return {r: int(text) for r, text in self._present("beat").items()}

    def whereabouts(self) -> dict[int, str]:
        return self._present("at")

    def endings(self) -> dict[int, tuple[str, str]]:
        return {r: tuple(json.loads(text)) for r, text in self._present("end").items()}


def check_address(addr: str) -> None:
    """Refuse at once an address that does not resolve: the store would retry it for the whole timeout."""
    try:
        socket.getaddrinfo(addr, None)
    except (OSError, ValueError) as e:  # ValueError: a name IDNA cannot encode (a label too long, or empty)
        why = e.strerror if isinstance(e, OSError) and e.strerror else "not a host name"
        raise UsageError(f"rank 0's address {clipped(addr)!r} does not resolve ({why}): set MASTER_ADDR "
                         "or --master-addr to a host every rank can reach") from None


def named(members: list[Member]) -> list[Member]:
    """Give each member its node's name: network namespaces or containers may share a host name."""
    indices: dict[str, set[str | None]] = {}
    for m in members:
        indices.setdefault(m.host, set()).add(m.node_index)
    return [replace(m, node=m.host if len(indices[m.host]) == 1 else f"{m.host}#{m.node_index}") for m in members]


def waiting_text(silent: list[int], where: dict[int, str], members: list[Member]) -> str:
    """"rank 2 (node2) went silent (died or hung) during X; ranks 0-1 were waiting in X"."""
    nodes = {m.rank: m.node for m in members}

    def who(ranks: list[int]) -> str:
        named = sorted({nodes[r] for r in ranks if r in nodes})
        return ranks_text(ranks) + (f" ({', '.join(named)})" if named else "")

    line = who(silent) + " went silent (died or hung)"
    spots = {where[r] for r in silent if r in where}
    if spots:
        line += f" during {', '.join(sorted(spots))}"
    waiting: dict[str, list[int]] = {}
    for r, spot in where.items():
        if r not in silent:
            waiting.setdefault(spot, []).append(r)
    if waiting:
        line += "; " + "; ".join(f"{ranks_text(rs)} {'was' if len(rs) == 1 else 'were'} waiting in {spot}"
                                 for spot, rs in waiting.items())
    return line
