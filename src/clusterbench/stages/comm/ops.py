"""How torch runs each collective: its buffers and its call, one small entry per collective.

The facts of each collective (its bus-bandwidth factor, how its Size buffer splits, whether it
reduces or has a root, what every rank holds after it) are the torch-free table of
clusterbench.collectives; an entry here adds only what torch needs, the nccl-tests design of one
harness for every op. Sizes follow the nccl-tests convention (docs/methodology.md §1): `count`
is always the element count of the buffer the Size column describes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from clusterbench.collectives import COLLECTIVES, Collective, Holds
from clusterbench.stages.comm.values import Expect, Values

Buffers = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Ctx:
    """One op at one size on one rank."""

    rank: int  # within the team
    n: int
    count: int
    dtype: torch.dtype
    device: torch.device
    root: int
    reduce_op: str
    in_place: bool
    values: Values
    group: dist.ProcessGroup | None = None  # None: the whole job
    members: tuple[int, ...] = ()  # the team's global ranks in team order; () for the whole job

    def gl(self, rank: int) -> int:
        """A team rank as the global rank torch's root and peer arguments take."""
        return self.members[rank] if self.members else rank

    @property
    def chunk(self) -> int:
        return self.count // self.n

    @property
    def torch_op(self) -> dist.ReduceOp:
        return _REDUCTIONS[self.reduce_op]

    @property
    def peer(self) -> int | None:
        """pt2pt partner: ranks pair up as (0,1), (2,3), ...; with odd n the last rank sits out."""
        other = self.rank ^ 1
        return other if other < self.n else None

    def empty(self, count: int) -> torch.Tensor:
        return torch.empty(count, dtype=self.dtype, device=self.device)

    def input(self, rank: int, count: int, offset: int = 0) -> torch.Tensor:
        return self.values.make(rank, count, offset)

    def copy_of(self, rank: int, offset: int = 0) -> Expect:
        """Expect rank's pattern, from element `offset` of it on."""
        return lambda a, b: self.values.pattern(rank, b - a, offset + a)

    def reduced(self, offset: int = 0) -> Expect:
        """Expect every rank's pattern reduced, from element `offset` on."""
        return lambda a, b: self.values.reduced(b - a, offset + a)

    def pieces(self, size: int, piece: Callable[[int], tuple[int, int]]) -> Expect:
        """Expect a concatenation of `size`-element pieces: piece j is rank owner's pattern from
        element offset on, where piece(j) = (owner, offset)."""
        def want(a: int, b: int) -> torch.Tensor:
            parts = []
            while a < b:
                j, within = divmod(a, size)
                end = min(b, (j + 1) * size)
                owner, offset = piece(j)
                parts.append(self.values.pattern(owner, end - a, offset + within))
                a = end
            return torch.cat(parts)
        return want


# Keyed by collectives.REDUCE_OPS, the names --reduce-op takes.
_REDUCTIONS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "prod": dist.ReduceOp.PRODUCT,
}

# torch 2.13 renamed the tensor forms; older releases (>= 2.4) only have the old names.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _chunk_of(c: Ctx, buf: torch.Tensor) -> torch.Tensor:
    return buf[c.rank * c.chunk : (c.rank + 1) * c.chunk]


def _all_gather_buffers(c: Ctx) -> Buffers:
    out = c.empty(c.count)
    mine = c.input(c.rank, c.chunk, c.rank * c.chunk)
    if c.in_place:
        return {"in": _chunk_of(c, out).copy_(mine), "out": out}
    return {"in": mine, "out": out}


def _reduce_scatter_buffers(c: Ctx) -> Buffers:
    inp = c.input(c.rank, c.count)
    return {"in": inp, "out": _chunk_of(c, inp) if c.in_place else c.empty(c.chunk)}


def _gather_buffers(c: Ctx) -> Buffers:
    bufs = {"in": c.input(c.rank, c.chunk, c.rank * c.chunk)}
    if c.rank == c.root:
        bufs["out"] = c.empty(c.count)
    return bufs


def _scatter_buffers(c: Ctx) -> Buffers:
    bufs = {"out": c.empty(c.chunk)}
    if c.rank == c.root:
        bufs["in"] = c.input(c.rank, c.count)
    return bufs


def _pt2pt_roles(c: Ctx, bidirectional: bool) -> set[str]:
    """Which of send ("in") and receive ("out") this rank does."""
    if c.peer is None:
        return set()
    if bidirectional:
        return {"in", "out"}
    return {"in"} if c.rank % 2 == 0 else {"out"}


def _pt2pt_buffers(c: Ctx, bidirectional: bool) -> Buffers:
    roles = _pt2pt_roles(c, bidirectional)
    bufs = {"in": c.input(c.rank, c.count)} if "in" in roles else {}
    if "out" in roles:
        bufs["out"] = c.empty(c.count)
    return bufs


def exchange(c: Ctx, sends: list[tuple[torch.Tensor, int]], recvs: list[tuple[torch.Tensor, int]]) -> None:
    """Post every send and receive (team ranks) as one batch, then wait for all. One batch, as
    nccl-tests' sendrecv does: NCCL may hold a send until the matching receive is posted, so a
    rank that sends before it receives deadlocks with a peer doing the same once the message
    outgrows NCCL's buffers."""
    ops = [dist.P2POp(dist.isend, t, c.gl(peer), c.group) for t, peer in sends]
    ops += [dist.P2POp(dist.irecv, t, c.gl(peer), c.group) for t, peer in recvs]
    for w in dist.batch_isend_irecv(ops) if ops else []:  # a rank without a peer sits this one out
        w.wait()


def _pt2pt_run(c: Ctx, b: Buffers) -> None:
    exchange(c, [(b["in"], c.peer)] if "in" in b else [], [(b["out"], c.peer)] if "out" in b else [])


def _senders(c: Ctx) -> list[int]:
    return [r for r in range(c.n) if r != c.root]


def _incast_buffers(c: Ctx) -> Buffers:
    if c.rank != c.root:
        return {"in": c.input(c.rank, c.count)}
    return {"out": c.empty(c.count * (c.n - 1))}


def _incast_run(c: Ctx, b: Buffers) -> None:
    if c.rank != c.root:
        exchange(c, [(b["in"], c.root)], [])
        return
    exchange(c, [], list(zip(b["out"].split(c.count), _senders(c))))


@dataclass(frozen=True)
class Op:
    """A collective as the sweep runs it: its facts, how its buffers are made, how torch calls it."""

    facts: Collective
    buffers: Callable[[Ctx], Buffers]
    run: Callable[[Ctx, Buffers], None]

    @property
    def name(self) -> str:
        return self.facts.name

    def expected(self, c: Ctx, bufs: Buffers) -> Expect | None:
        """What buffers["out"] must hold on this rank; None where nothing is defined to check."""
        if "out" not in bufs or (self.facts.checked_on_root and c.rank != c.root):
            return None
        return _HOLDS[self.facts.holds](c)


_HOLDS: dict[Holds, Callable[[Ctx], Expect]] = {
    Holds.REDUCTION: lambda c: c.reduced(),
    Holds.REDUCTION_CHUNK: lambda c: c.reduced(c.rank * c.chunk),
    Holds.ALL_CHUNKS: lambda c: c.pieces(c.chunk, lambda j: (j, j * c.chunk)),
    Holds.CHUNKS_FOR_IT: lambda c: c.pieces(c.chunk, lambda j: (j, c.rank * c.chunk)),
    Holds.ROOT_BUFFER: lambda c: c.copy_of(c.root),
    Holds.ROOT_CHUNK: lambda c: c.copy_of(c.root, c.rank * c.chunk),
    Holds.PEER_BUFFER: lambda c: c.copy_of(c.peer),
    Holds.PREVIOUS_BUFFER: lambda c: c.copy_of((c.rank - 1) % c.n),
    Holds.SENDERS_BUFFERS: lambda c: c.pieces(c.count, lambda j: (_senders(c)[j], 0)),
}


def _in_place(c: Ctx) -> Buffers:
    return {"out": c.input(c.rank, c.count)}


def _op(name: str, *, buffers: Callable[[Ctx], Buffers], run: Callable[[Ctx, Buffers], None]) -> Op:
    return Op(COLLECTIVES[name], buffers, run)


OPS: dict[str, Op] = {
    op.name: op
    for op in (
        _op("all_reduce", buffers=_in_place, run=lambda c, b: dist.all_reduce(b["out"], op=c.torch_op, group=c.group)),
        _op("all_gather", buffers=_all_gather_buffers, run=lambda c, b: _all_gather(b["out"], b["in"], group=c.group)),
        _op("reduce_scatter", buffers=_reduce_scatter_buffers,
            run=lambda c, b: _reduce_scatter(b["out"], b["in"], op=c.torch_op, group=c.group)),
        _op("all_to_all", buffers=lambda c: {"in": c.input(c.rank, c.count), "out": c.empty(c.count)},
            run=lambda c, b: dist.all_to_all_single(b["out"], b["in"], group=c.group)),
        _op("broadcast", buffers=_in_place, run=lambda c, b: dist.broadcast(b["out"], src=c.gl(c.root), group=c.group)),
        _op("reduce", buffers=_in_place,
            run=lambda c, b: dist.reduce(b["out"], dst=c.gl(c.root), op=c.torch_op, group=c.group)),
        _op("gather", buffers=_gather_buffers, run=lambda c, b: dist.gather(
            b["in"], list(b["out"].split(c.chunk)) if "out" in b else None, dst=c.gl(c.root), group=c.group)),
        _op("scatter", buffers=_scatter_buffers, run=lambda c, b: dist.scatter(
            b["out"], list(b["in"].split(c.chunk)) if "in" in b else None, src=c.gl(c.root), group=c.group)),
        _op("pt2pt", buffers=lambda c: _pt2pt_buffers(c, bidirectional=False), run=_pt2pt_run),
        _op("pt2pt_bidir", buffers=lambda c: _pt2pt_buffers(c, bidirectional=True), run=_pt2pt_run),
        _op("sendrecv", buffers=lambda c: {"in": c.input(c.rank, c.count), "out": c.empty(c.count)},
            run=lambda c, b: exchange(c, [(b["in"], (c.rank + 1) % c.n)], [(b["out"], (c.rank - 1) % c.n)])),
        _op("incast", buffers=_incast_buffers, run=_incast_run),
    )
}
