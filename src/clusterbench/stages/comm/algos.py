"""Collective algorithms built from point-to-point sends and receives only (docs/methodology.md §13).

Each algorithm fills the same buffers as the native op it stands for (stages/comm/ops.py), so the sweep
times it, checks it against the same values and credits it the same busbw factor: an entry here
is only (name, op, function), its name also listed among the op's `built` algorithms in the
torch-free table of clusterbench.collectives, which option parsing reads. Every step posts its sends and receives as one batch (ops.exchange),
so neighbours that send to each other at once cannot deadlock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist

from clusterbench.collectives import NATIVE
from clusterbench.stages.comm.ops import OPS, Buffers, Ctx, Op, exchange

# Keyed by collectives.BUILT_REDUCTIONS, the reductions --algo accepts.
COMBINE: dict[str, Callable[..., torch.Tensor]] = {
    "sum": torch.add, "max": torch.maximum, "min": torch.minimum, "prod": torch.mul,
}
PIPELINE_BYTES = 256 * 1024  # chain broadcast: one piece per step; below this the per-step latency dominates
MAX_PIECES = 16
SUB_PIECES = 4  # ring reduce steps: parts per step, so the reduction overlaps the transfer

Pair = tuple[torch.Tensor, int]


def _step(c: Ctx, sends: list[Pair], recvs: list[Pair]) -> None:
    """One round; empty pieces (sizes not divisible by n) are skipped, on both sides alike."""
    exchange(c, [s for s in sends if s[0].numel()], [r for r in recvs if r[0].numel()])


def _reducing_step(c: Ctx, send: torch.Tensor, to: int, into: torch.Tensor, tmp: torch.Tensor, frm: int) -> None:
    """Send `send` while receiving into `tmp` and reducing it into `into`, in SUB_PIECES parts: the
    reduction of one part overlaps the transfer of the next, as the backend's own ring does."""
    sends, recvs = _pieces(send, SUB_PIECES), _pieces(tmp, SUB_PIECES)
    ops = [dist.P2POp(dist.isend, t, c.gl(to), c.group) for t in sends if t.numel()]
    ops += [dist.P2POp(dist.irecv, t, c.gl(frm), c.group) for t in recvs if t.numel()]
    works = dist.batch_isend_irecv(ops) if ops else []
    sent = sum(1 for t in sends if t.numel())
    for w, got, dst in zip(works[sent:], [t for t in recvs if t.numel()], [t for t in _pieces(into, SUB_PIECES)
                                                                          if t.numel()]):
        w.wait()
        _combine(c, dst, got, dst)
    for w in works[:sent]:
        w.wait()


def _combine(c: Ctx, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    COMBINE[c.reduce_op](a, b, out=out)


def _bounds(count: int, parts: int) -> list[int]:
    """Start offsets of `parts` near-equal pieces of `count` elements, and the end."""
    base, extra = divmod(count, parts)
    return [i * base + min(i, extra) for i in range(parts + 1)]


def _pieces(t: torch.Tensor, parts: int) -> list[torch.Tensor]:
    b = _bounds(t.numel(), parts)
    return [t[b[i]:b[i + 1]] for i in range(parts)]


# all_reduce -----------------------------------------------------------------------------------

def ring_all_reduce(c: Ctx, b: Buffers) -> None:
    """Reduce-scatter then all-gather around the ring: 2(n-1) steps of S/n each way."""
    n, r = c.n, c.rank
    if n == 1:
        return
    piece = _pieces(b["out"], n)
    right, left = (r + 1) % n, (r - 1) % n
    tmp = c.empty(piece[0].numel())
    for s in range(n - 1):
        send, recv = piece[(r - s) % n], piece[(r - s - 1) % n]
        _reducing_step(c, send, right, recv, tmp[:recv.numel()], left)
    # Rank r now holds the whole reduction of piece r + 1.
    for s in range(n - 1):
        _step(c, [(piece[(r + 1 - s) % n], right)], [(piece[(r - s) % n], left)])


def reduce_bcast_all_reduce(c: Ctx, b: Buffers) -> None:
    """Every rank sends its whole buffer to the root, which reduces and sends the result back:
    the root's link carries (n-1) x S each way, which is why busbw stays far below the link's."""
    t, root = b["out"], c.root
    others = [p for p in range(c.n) if p != root]
    if c.rank != root:
        _step(c, [(t, root)], [])
        _step(c, [], [(t, root)])
        return
    got = [c.empty(t.numel()) for _ in others]
    _step(c, [], list(zip(got, others)))
    for g in got:  # a fixed order: every run reduces the same way
        _combine(c, t, g, t)
    _step(c, [(t, p) for p in others], [])


def tree_all_reduce(c: Ctx, b: Buffers) -> None:
    """Reduce up a binary tree (heap order from rank 0), then broadcast down it: 2 log2 n levels."""
    t, r = b["out"], c.rank
    children = [k for k in (2 * r + 1, 2 * r + 2) if k < c.n]
    parent = (r - 1) // 2
    got = [c.empty(t.numel()) for _ in children]
    _step(c, [], list(zip(got, children)))
    for g in got:
        _combine(c, t, g, t)
    if r:
        _step(c, [(t, parent)], [])
        _step(c, [], [(t, parent)])
    _step(c, [(t, k) for k in children], [])


def halving_doubling_all_reduce(c: Ctx, b: Buffers) -> None:
    """Rabenseifner: reduce-scatter by recursive halving, all-gather by recursive doubling, over the
    largest power of two p <= n; the n - p extra ranks fold their data into a partner first and
    get the result back last."""
    t, r, n = b["out"], c.rank, c.n
    p = 1 << (n.bit_length() - 1)
    extra = n - p
    if r < 2 * extra:  # ranks 0..2*extra-1 pair up (even, odd); the even one sits out
        if r % 2 == 0:
            _step(c, [(t, r + 1)], [])
            _step(c, [], [(t, r + 1)])
            return
        tmp = c.empty(t.numel())
        _step(c, [], [(tmp, r - 1)])
        _combine(c, t, tmp, t)
    me = r // 2 if r < 2 * extra else r - extra  # rank among the p

    def real(v: int) -> int:
        return 2 * v + 1 if v < extra else v + extra

    bounds = _bounds(t.numel(), p)
    tmp = c.empty(bounds[p // 2])  # the largest half: the uneven pieces come first
    lo, hi, kept = 0, p, []
    d = p // 2
    while d:
        mid = (lo + hi) // 2
        keep, give = ((mid, hi), (lo, mid)) if me & d else ((lo, mid), (mid, hi))
        mine = t[bounds[keep[0]]:bounds[keep[1]]]
        _step(c, [(t[bounds[give[0]]:bounds[give[1]]], real(me ^ d))], [(tmp[:mine.numel()], real(me ^ d))])
        _combine(c, mine, tmp[:mine.numel()], mine)
        kept.append((lo, hi))
        lo, hi = keep
        d //= 2
    while kept:  # undo the halving: trade my range for the other half of the range it came from
        plo, phi = kept.pop()
        other, peer = ((plo, lo) if lo > plo else (hi, phi)), real(me ^ (hi - lo))
        _step(c, [(t[bounds[lo]:bounds[hi]], peer)], [(t[bounds[other[0]]:bounds[other[1]]], peer)])
        lo, hi = plo, phi
    if r < 2 * extra:
        _step(c, [(t, r - 1)], [])


# broadcast ------------------------------------------------------------------------------------

def chain_broadcast(c: Ctx, b: Buffers) -> None:
    """root -> root+1 -> ... in pieces, so every link of the chain is busy at once: n - 2 + k steps
    of S/k, k pieces of PIPELINE_BYTES or more."""
    t = b["out"]
    pos = (c.rank - c.root) % c.n
    k = max(1, min(MAX_PIECES, t.numel() * t.element_size() // PIPELINE_BYTES))
    piece = _pieces(t, k)
    nxt, prev = (c.rank + 1) % c.n, (c.rank - 1) % c.n
    for s in range(k + c.n - 2):
        sends = [(piece[s - pos], nxt)] if pos < c.n - 1 and 0 <= s - pos < k else []
        recvs = [(piece[s - pos + 1], prev)] if pos > 0 and 0 <= s - pos + 1 < k else []
        _step(c, sends, recvs)


def binomial_broadcast(c: Ctx, b: Buffers) -> None:
    """Each round every rank that has the data sends it to one that has not: ceil(log2 n) rounds."""
    t, n = b["out"], c.n
    v = (c.rank - c.root) % n  # position relative to the root
    mask = 1
    while mask < n:
        if v < mask and v + mask < n:
            _step(c, [(t, (c.rank + mask) % n)], [])
        elif mask <= v < 2 * mask:
            _step(c, [], [(t, (c.rank - mask) % n)])
        mask <<= 1


# all_gather, reduce_scatter, all_to_all --------------------------------------------------------

def ring_all_gather(c: Ctx, b: Buffers) -> None:
    """n - 1 steps: each passes on the chunk it received last."""
    n, r = c.n, c.rank
    piece = list(b["out"].split(c.chunk))
    piece[r].copy_(b["in"])  # a no-op in place, where "in" is this very chunk
    for s in range(n - 1):
        _step(c, [(piece[(r - s) % n], (r + 1) % n)], [(piece[(r - s - 1) % n], (r - 1) % n)])


def ring_reduce_scatter(c: Ctx, b: Buffers) -> None:
    """n - 1 steps: each adds its own chunk to the partial sum it received and passes it on; the
    input stays as it was (the partials live in a scratch chunk)."""
    n, r = c.n, c.rank
    piece = list(b["in"].split(c.chunk))
    if n == 1:
        b["out"].copy_(piece[0])
        return
    tmp, acc = c.empty(c.chunk), c.empty(c.chunk)
    send = piece[(r - 1) % n]
    for s in range(n - 1):
        _step(c, [(send, (r + 1) % n)], [(tmp, (r - 1) % n)])
        # The send has completed, so acc can take the next partial; the last lands in "out".
        send = b["out"] if s == n - 2 else acc
        _combine(c, piece[(r - s - 2) % n], tmp, send)


def pairwise_all_to_all(c: Ctx, b: Buffers) -> None:
    """n - 1 steps: at step s each rank sends to rank + s and receives from rank - s."""
    n, r = c.n, c.rank
    ins, outs = b["in"].split(c.chunk), b["out"].split(c.chunk)
    outs[r].copy_(ins[r])
    for s in range(1, n):
        to, frm = (r + s) % n, (r - s) % n
        _step(c, [(ins[to], to)], [(outs[frm], frm)])


@dataclass(frozen=True)
class Algo:
    """One entry of a collective's `built` list in clusterbench.collectives, and the function that runs it."""

    name: str
    op: str  # the native op whose buffers, check and busbw factor it shares
    run: Callable[[Ctx, Buffers], None]


ALGOS = (
    Algo("ring", "all_reduce", ring_all_reduce),
    Algo("reduce_bcast", "all_reduce", reduce_bcast_all_reduce),
    Algo("tree", "all_reduce", tree_all_reduce),
    Algo("halving_doubling", "all_reduce", halving_doubling_all_reduce),
    Algo("chain", "broadcast", chain_broadcast),
    Algo("binomial", "broadcast", binomial_broadcast),
    Algo("ring", "all_gather", ring_all_gather),
    Algo("ring", "reduce_scatter", ring_reduce_scatter),
    Algo("pairwise", "all_to_all", pairwise_all_to_all),
)


def variant(op: str, algo: str) -> Op:
    """The op table's entry with its call replaced by the algorithm's: same buffers, check, factor."""
    if algo == NATIVE:
        return OPS[op]
    return replace(OPS[op], run=next(a.run for a in ALGOS if a.name == algo and a.op == op))
