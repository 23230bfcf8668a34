"""The op table: one small declarative entry per collective, one harness for all.

Each entry says only what differs between collectives (the nccl-tests design): the
bus-bandwidth factor, whether the Size buffer splits into n per-rank chunks, whether it can
run in place, which buffers it needs, how to call it, and what every rank must hold after.
Sizes and factors follow the nccl-tests convention (docs/methodology.md §1):
`count` is always the element count of the buffer the Size column describes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import torch
import torch.distributed as dist

from clusterbench.comm.values import Expect, Values

Buffers = dict[str, torch.Tensor]


class InPlace(Enum):
    ALWAYS = "always"  # torch's API for it writes into its input
    OPTIONAL = "optional"  # --in-place aliases the input with the rank's slice of the output
    NEVER = "never"


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
        return REDUCE_OPS[self.reduce_op]

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


@dataclass(frozen=True)
class Op:
    name: str
    busbw_factor: Callable[[int], float]
    per_rank_chunks: bool  # the Size buffer is n chunks, so counts round to multiples of n
    in_place: InPlace
    reduces: bool
    buffers: Callable[[Ctx], Buffers]
    run: Callable[[Ctx, Buffers], None]
    expected: Callable[[Ctx], Expect | None]  # what buffers["out"] must hold; None: nothing to check here
    active: Callable[[int, int], bool] = lambda rank, n: True
    min_ranks: int = 1
    bidirectional: bool = False
    rooted: bool = False  # --root names the rank it starts from or ends at

    def granularity(self, n: int) -> int:
        return n if self.per_rank_chunks else 1


REDUCE_OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "prod": dist.ReduceOp.PRODUCT,
}

# torch 2.13 renamed the tensor forms; older releases (>= 2.4) only have the old names.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _ring(n: int) -> float:
    return (n - 1) / n


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


def _pt2pt(name: str, bidirectional: bool) -> Op:
    return Op(
        name=name,
        # Bidirectional counts the bytes moving both ways (docs/methodology.md §1).
        busbw_factor=lambda n: 2.0 if bidirectional else 1.0,
        per_rank_chunks=False,
        in_place=InPlace.NEVER,
        reduces=False,
        buffers=lambda c: _pt2pt_buffers(c, bidirectional),
        run=_pt2pt_run,
        expected=lambda c: c.copy_of(c.peer) if "out" in _pt2pt_roles(c, bidirectional) else None,
        active=lambda rank, n: (rank ^ 1) < n,
        min_ranks=2,
        bidirectional=bidirectional,
    )


def _incast_buffers(c: Ctx) -> Buffers:
    if c.rank != c.root:
        return {"in": c.input(c.rank, c.count)}
    return {"out": c.empty(c.count * (c.n - 1))}


def _incast_run(c: Ctx, b: Buffers) -> None:
    if c.rank != c.root:
        exchange(c, [(b["in"], c.root)], [])
        return
    senders = [r for r in range(c.n) if r != c.root]
    exchange(c, [], list(zip(b["out"].split(c.count), senders)))


def _incast_expected(c: Ctx) -> Expect | None:
    if c.rank != c.root:
        return None
    senders = [r for r in range(c.n) if r != c.root]
    return c.pieces(c.count, lambda j: (senders[j], 0))


OPS: dict[str, Op] = {
    op.name: op
    for op in (
        Op(
            "all_reduce", lambda n: 2 * (n - 1) / n, False, InPlace.ALWAYS, True,
            buffers=lambda c: {"out": c.input(c.rank, c.count)},
            run=lambda c, b: dist.all_reduce(b["out"], op=c.torch_op, group=c.group),
            expected=lambda c: c.reduced(),
        ),
        Op(
            "all_gather", _ring, True, InPlace.OPTIONAL, False,
            buffers=_all_gather_buffers,
            run=lambda c, b: _all_gather(b["out"], b["in"], group=c.group),
            expected=lambda c: c.pieces(c.chunk, lambda j: (j, j * c.chunk)),
        ),
        Op(
            "reduce_scatter", _ring, True, InPlace.OPTIONAL, True,
            buffers=_reduce_scatter_buffers,
            run=lambda c, b: _reduce_scatter(b["out"], b["in"], op=c.torch_op, group=c.group),
            expected=lambda c: c.reduced(c.rank * c.chunk),
        ),
        Op(
            "all_to_all", _ring, True, InPlace.NEVER, False,
            buffers=lambda c: {"in": c.input(c.rank, c.count), "out": c.empty(c.count)},
            run=lambda c, b: dist.all_to_all_single(b["out"], b["in"], group=c.group),
            expected=lambda c: c.pieces(c.chunk, lambda j: (j, c.rank * c.chunk)),
        ),
        Op(
            "broadcast", lambda n: 1.0, False, InPlace.ALWAYS, False,
            buffers=lambda c: {"out": c.input(c.rank, c.count)},
            run=lambda c, b: dist.broadcast(b["out"], src=c.gl(c.root), group=c.group),
            expected=lambda c: c.copy_of(c.root),
            rooted=True,
        ),
        Op(
            "reduce", lambda n: 1.0, False, InPlace.ALWAYS, True,
            buffers=lambda c: {"out": c.input(c.rank, c.count)},
            run=lambda c, b: dist.reduce(b["out"], dst=c.gl(c.root), op=c.torch_op, group=c.group),
            # Only the root's buffer is defined after a reduce.
            expected=lambda c: c.reduced() if c.rank == c.root else None,
            rooted=True,
        ),
        Op(
            "gather", _ring, True, InPlace.NEVER, False,
            buffers=_gather_buffers,
            run=lambda c, b: dist.gather(
                b["in"], list(b["out"].split(c.chunk)) if "out" in b else None, dst=c.gl(c.root), group=c.group
            ),
            expected=lambda c: c.pieces(c.chunk, lambda j: (j, j * c.chunk)) if c.rank == c.root else None,
            rooted=True,
        ),
        Op(
            "scatter", _ring, True, InPlace.NEVER, False,
            buffers=_scatter_buffers,
            run=lambda c, b: dist.scatter(
                b["out"], list(b["in"].split(c.chunk)) if "in" in b else None, src=c.gl(c.root), group=c.group
            ),
            expected=lambda c: c.copy_of(c.root, c.rank * c.chunk),
            rooted=True,
        ),
        _pt2pt("pt2pt", bidirectional=False),
        _pt2pt("pt2pt_bidir", bidirectional=True),
        # --pattern ring: each rank sends to the next and receives from the previous at once, so
        # on a multi-node job every node boundary is crossed (pt2pt's pairs 0-1, 2-3 never are).
        Op(
            "sendrecv", lambda n: 1.0, False, InPlace.NEVER, False,
            buffers=lambda c: {"in": c.input(c.rank, c.count), "out": c.empty(c.count)},
            run=lambda c, b: exchange(c, [(b["in"], (c.rank + 1) % c.n)], [(b["out"], (c.rank - 1) % c.n)]),
            expected=lambda c: c.copy_of((c.rank - 1) % c.n),
            min_ranks=2,
        ),
        # --pattern incast: every rank sends Size bytes to the root at once (the congestion case);
        # busbw is what arrives at the root per second.
        Op(
            "incast", lambda n: n - 1.0, False, InPlace.NEVER, False,
            buffers=_incast_buffers, run=_incast_run, expected=_incast_expected, min_ranks=2, rooted=True,
        ),
    )
}

# `--ops all` runs each collective once; pt2pt's direction comes from --bidirectional; the
# ring and incast patterns are asked for by name (or --pattern).
ALL_OPS = [name for name in OPS if name not in ("pt2pt_bidir", "sendrecv", "incast")]
