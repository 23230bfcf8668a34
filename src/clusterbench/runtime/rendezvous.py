"""The job's meeting point: one TCPStore that every rank joins before the process group forms,
then a board where each rank leaves where it is and how it ended.

Joining through our own keys rather than inside init_process_group lets a rendezvous that
never completes name the hosts that came, and the ranks that never did (with the node their
launcher meant them for, where it says). A launch that cannot work ends within the rendezvous
timeout, not the collectives' one, in one line on every rank: an address that does not resolve
(asked with a deadline, as a resolver whose servers never answer would hold getaddrinfo for
minutes), a store nobody answers at, a port another process holds (naming it, where /proc
tells), ranks started with different world sizes (the first to join sets `world`; a rank that
differs leaves its line under `conflict`, which every waiting rank reads). The `at` and `end` keys let whoever is left (the
local supervisor, the Ray driver, or any surviving rank under an external launcher) say
which rank stopped where while the others waited; the `beat` keys, which every rank's process
counts up while it lives, tell a rank that died or stopped from one still waiting on it. When a
collective fails, its rank asks for `flight/asked` and leaves its Flight Recorder under `flight`; every
live rank's heartbeat sees the ask and leaves its own, so whoever reports reads every rank's record,
across nodes, even a rank stuck outside any collective.
"""

from __future__ import annotations

import datetime
import errno
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TypeVar

import torch.distributed as dist

from clusterbench.argtypes import clipped
from clusterbench.errors import RunFailed, UsageError
from clusterbench.units import ranks_text

POLL_S = 0.05
T = TypeVar("T")
# The longest a name may take to resolve: a resolver answers in milliseconds or, its servers gone
# or silent, retries for tens of seconds (resolv.conf's timeout x attempts, per address family).
RESOLVE_S = 10.0


@dataclass(frozen=True)
class Member:
    """One rank as it introduced itself."""

    rank: int
    host: str
    local_rank: int
    node_index: str | None = None  # the launcher's, when it gives one
    world_size: int = 0  # as its launcher told it
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
        """Host the store (server) or reach it within `timeout_s`; either failure is one line naming addr:port."""
        check_address(addr, min(RESOLVE_S, timeout_s))
        try:
            # Within a deadline of our own: a client whose connection another program accepted waits for the
            # store's greeting with no timeout at all.
            store = answer_within(lambda: dist.TCPStore(
                addr, port, None if server else world_size, is_master=server,
                timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False), timeout_s + 1)
        except TimeoutError:
            raise RunFailed(f"something at {addr}:{port} took the connection but never answered as rank 0's rendezvous "
                            f"within {timeout_s:g} s: another program holds port {port} on {clipped(addr)}; set "
                            "MASTER_PORT or --master-port to a free port") from None
        except (RuntimeError, OSError) as e:
            if server:  # a port taken, or not ours to open: the setup's fault (MASTER_PORT's), not the run's
                raise UsageError(_unopened(port, e)) from None
            raise RunFailed(f"nobody answered at {addr}:{port} (rank 0's rendezvous) within {timeout_s:g} s: is "
                            f"rank 0 running on {clipped(addr)}, MASTER_ADDR/MASTER_PORT the same on every rank, and "
                            f"port {port} open between the hosts?") from None
        return cls(store, world_size, prefix)

    def settle(self, timeout_s: float) -> None:
        """From now on the store's waits are the collectives' (a rank's subgroups meet there while a
        slower rank still measures): the rendezvous timeout bounded only the meeting."""
        self.store.set_timeout(datetime.timedelta(seconds=timeout_s))

    @property
    def port(self) -> int:
        return self.store.underlying_store.port

    @property
    def host(self) -> str:
        """Rank 0's address, as the ranks reach the store."""
        return self.store.underlying_store.host

    def group_store(self) -> dist.Store:
        """Where the process group keeps its own keys."""
        return dist.PrefixStore("pg", self.store)

    def _key(self, kind: str, rank: int) -> str:
        return f"{kind}/{rank}"

    def join(self, me: Member, timeout_s: float, planned: Callable[[int], str | None] = lambda rank: None
             ) -> list[Member]:
        """Introduce this rank, wait for all others, and return everyone. On timeout the line names the
        ranks that never came (and the node `planned` says each should have run on); a rank whose world
        size differs from the first one's ends every waiting rank at once."""
        me = replace(me, world_size=self.world_size)
        deadline = time.monotonic() + timeout_s
        try:
            first = self.store.compare_set("world", "", json.dumps(asdict(me))).decode()
            if first and json.loads(first)["world_size"] != self.world_size:
                # RunFailed, not UsageError: the ranks see different settings, so each must say so, not rank 0 alone.
                line = _sizes_differ(Member(**json.loads(first)), me)
                self.store.set("conflict", line)
                raise RunFailed(line)
            self.store.set(self._key("join", me.rank), json.dumps(asdict(me)))
            self.store.add("joined", 1)
            while self.store.add("joined", 0) < self.world_size:
                if self.store.check(["conflict"]):
                    raise RunFailed(self.store.get("conflict").decode())
                if time.monotonic() > deadline:
                    raise RunFailed(self._absent(timeout_s, planned))
                time.sleep(POLL_S)
        except (RuntimeError, OSError):
            raise RunFailed(f"the rendezvous closed before all {self.world_size} ranks joined: rank 0 gave up "
                            "waiting (its own line names the ranks that never came)") from None
        keys = [self._key("join", r) for r in range(self.world_size)]
        self.members = named([Member(**json.loads(v)) for v in self.store.multi_get(keys)])
        return self.members

    def _absent(self, timeout_s: float, planned: Callable[[int], str | None]) -> str:
        came = self._present("join")
        hosts: dict[str, list[int]] = {}
        for rank, text in came.items():
            hosts.setdefault(json.loads(text)["host"], []).append(rank)
        where = "; ".join(f"{node}: {ranks_text(ranks)}" for node, ranks in hosts.items())
        missing: dict[str | None, list[int]] = {}
        for r in range(self.world_size):
            if r not in came:
                missing.setdefault(planned(r), []).append(r)
        absent = ", ".join(ranks_text(ranks) + (f" (meant for {node})" if node else "")
                           for node, ranks in missing.items())
        return (f"rendezvous incomplete after {timeout_s:g} s: {len(came)} of {self.world_size} ranks joined "
                f"({where}); {absent} never came")

    def _present(self, kind: str) -> dict[int, str]:
        return {r: value.decode() for r, value in self._left(kind).items()}

    def _left(self, kind: str) -> dict[int, bytes]:
        """What each rank left under `kind`, by rank: those that left nothing are absent."""
        keys = {r: self._key(kind, r) for r in range(self.world_size)}
        return {r: self.store.get(k) for r, k in keys.items() if self.store.check([k])}

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

    def ask_records(self) -> None:
        """Ask every rank whose process lives for its Flight Recorder: a collective failed or timed out."""
        self.store.set("flight/asked", "1")

    def records_asked(self) -> bool:
        return self.store.check(["flight/asked"])

    def leave_record(self, rank: int, data: bytes) -> None:
        self.store.set(self._key("flight", rank), data)

    def records(self) -> dict[int, bytes]:
        """The Flight Recorder dumps the ranks left, by rank."""
        return self._left("flight")


def check_address(addr: str, within_s: float = RESOLVE_S) -> None:
    """Refuse an address that does not resolve within `within_s`: the store would retry it for the whole
    timeout, and a resolver whose servers never answer holds getaddrinfo far longer than that."""
    try:
        answer_within(lambda: socket.getaddrinfo(addr, None), within_s)
    except TimeoutError:
        raise UsageError(f"rank 0's address {clipped(addr)!r} did not resolve within {within_s:g} s (no name server "
                         "answered): set MASTER_ADDR or --master-addr to an address, or fix /etc/resolv.conf") from None
    except (OSError, ValueError) as e:  # ValueError: a name IDNA cannot encode (a label too long, or empty)
        why = e.strerror if isinstance(e, OSError) and e.strerror else "not a host name"
        raise UsageError(f"rank 0's address {clipped(addr)!r} does not resolve ({why}): set MASTER_ADDR "
                         "or --master-addr to a host every rank can reach") from None


def answer_within(ask: Callable[[], T], within_s: float) -> T:
    """ask()'s answer, or its exception, or TimeoutError once `within_s` pass: a call that cannot be
    interrupted (the C resolver) is left to finish in a thread nobody waits for."""
    answer: list[tuple[T | None, BaseException | None]] = []

    def asking() -> None:
        try:
            answer.append((ask(), None))
        except Exception as e:  # noqa: BLE001 - handed to the caller, who knows which it expects
            answer.append((None, e))

    thread = threading.Thread(target=asking, daemon=True, name="clusterbench-ask")
    thread.start()
    thread.join(within_s)
    if not answer:
        raise TimeoutError(f"no answer within {within_s:g} s")
    value, error = answer[0]
    if error is not None:
        raise error
    return value  # type: ignore[return-value]


def _sizes_differ(first: Member, me: Member) -> str:
    return (f"ranks disagree on the world size: rank {first.rank} ({first.host}) was started with {first.world_size} "
            f"ranks, rank {me.rank} ({me.host}) with {me.world_size}: start every rank of one job alike")


def _unopened(port: int, e: BaseException) -> str:
    """Why rank 0 could not open the store on `port`: a port in use names its holder, where /proc tells."""
    text = str(e)
    if "EADDRINUSE" not in text and errno.errorcode[errno.EADDRINUSE] not in text and "in use" not in text:
        return f"cannot open the rendezvous on port {port}: {clipped(text.splitlines()[0] if text else type(e).__name__)}"
    holder = port_holder(port)
    held = f" (held by {holder})" if holder else ""
    return (f"cannot open the rendezvous on port {port}: the port is in use on {socket.gethostname()}{held}; "
            "set MASTER_PORT or --master-port to a free port")


def port_holder(port: int) -> str | None:
    """"pid 123 (python3 -m http.server)" for the process listening on TCP `port` in this network namespace,
    from /proc; None where /proc does not say (another user's process, or no /proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local address "0100007F:1F90", state 0A (LISTEN), inode the tenth field
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in os.listdir(f"/proc/{pid}/fd")):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                return f"pid {pid} ({clipped(' '.join(a.decode(errors='replace') for a in argv if a))})"
        except OSError:  # gone meanwhile, or not ours to look into
            continue
    return None


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
