"""What each collective is, in one torch-free table: the facts the sweep, the cost model, the
predictor, the scopes and the reports all read (docs/methodology.md §1, §13, §14).

An entry says only what is true of the collective itself: how its bus bandwidth follows from
its algorithm bandwidth (the nccl-tests factor), how its Size buffer splits, whether it reduces,
has a root or pairs ranks, the latency steps of its ring form, which NCCL algorithms and which
of clusterbench's send/recv algorithms can run it, and what every rank must hold after it.
How torch calls it lives in stages/comm/ops.py, one entry there per entry here; reading a finished run
needs only this table, so analysing one never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

# The NCCL_ALGO values, in NCCL's own order (NCCL reads the variable when it sets up a communicator).
NCCL_ALGORITHMS = ("ring", "tree", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat")
REDUCE_OPS = ("sum", "avg", "max", "min", "prod")
# The reductions a send/recv algorithm applies locally, exactly as the backend does. avg is left out:
# the backend's rounding (scale then sum, or sum then scale) is its own and the check is exact.
BUILT_REDUCTIONS = ("sum", "max", "min", "prod")
NATIVE = "native"  # the backend's own op, beside the algorithms built from send/recv


class InPlace(Enum):
    ALWAYS = "always"  # torch's API for it writes into its input
    OPTIONAL = "optional"  # --in-place aliases the input with the rank's slice of the output
    NEVER = "never"


class Holds(Enum):
    """What a checked rank's output holds after the collective, in the words the docs use."""

    REDUCTION = "every rank's buffer, reduced"
    REDUCTION_CHUNK = "its chunk of every rank's buffer, reduced"
    ALL_CHUNKS = "every rank's chunk, in rank order"
    CHUNKS_FOR_IT = "the chunk every rank holds for it, in rank order"
    ROOT_BUFFER = "the root's buffer"
    ROOT_CHUNK = "its chunk of the root's buffer"
    PEER_BUFFER = "its partner's buffer"
    PREVIOUS_BUFFER = "the previous rank's buffer"
    SENDERS_BUFFERS = "every sender's buffer, in rank order"


def _ring(n: int) -> float:
    return (n - 1) / n


@dataclass(frozen=True)
class Collective:
    name: str
    busbw_factor: Callable[[int], float]  # busbw = algbw x this, for n ranks (nccl-tests)
    holds: Holds
    chunked: bool = False  # the Size buffer is n per-rank chunks, so counts round to multiples of n
    in_place: InPlace = InPlace.NEVER
    reduces: bool = False
    rooted: bool = False  # --root names the rank it starts from or ends at
    checked_on_root: bool = False  # only the root's output is defined afterwards
    paired: bool = False  # ranks pair up as (0,1), (2,3), ...; with odd n the last one sits out
    bidirectional: bool = False
    min_ranks: int = 1
    latency_steps: Callable[[int], float] | None = None  # steps of its ring (or chain) form; None: not modelled
    crosses_every_node: bool = False  # as a ring every byte crosses each node boundary: busbw is a node's traffic
    nccl: tuple[str, ...] = ()  # the NCCL algorithms that can run it when forced (--nccl-algo)
    built: tuple[str, ...] = ()  # the send/recv algorithms of stages/comm/algos.py that stand for it (--algo)
    in_all: bool = True  # `--ops all` runs it

    def granularity(self, n: int) -> int:
        return n if self.chunked else 1

    def active(self, rank: int, n: int) -> bool:
        """Whether `rank` of `n` takes part at all."""
        return not self.paired or (rank ^ 1) < n


COLLECTIVES: dict[str, Collective] = {
    c.name: c
    for c in (
        Collective("all_reduce", busbw_factor=lambda n: 2 * (n - 1) / n, holds=Holds.REDUCTION,
                   in_place=InPlace.ALWAYS, reduces=True, latency_steps=lambda n: 2 * (n - 1),
                   crosses_every_node=True, nccl=("ring", "tree", "collnetdirect", "collnetchain", "nvls", "nvlstree"),
                   built=("ring", "reduce_bcast", "tree", "halving_doubling")),
        Collective("all_gather", busbw_factor=_ring, holds=Holds.ALL_CHUNKS, chunked=True, in_place=InPlace.OPTIONAL,
                   latency_steps=lambda n: n - 1, crosses_every_node=True, nccl=("ring", "nvls", "pat"),
                   built=("ring",)),
        Collective("reduce_scatter", busbw_factor=_ring, holds=Holds.REDUCTION_CHUNK, chunked=True,
                   in_place=InPlace.OPTIONAL, reduces=True, latency_steps=lambda n: n - 1, crosses_every_node=True,
                   nccl=("ring", "nvls", "pat"), built=("ring",)),
        Collective("all_to_all", busbw_factor=_ring, holds=Holds.CHUNKS_FOR_IT, chunked=True,
                   latency_steps=lambda n: n - 1, built=("pairwise",)),
        Collective("broadcast", busbw_factor=lambda n: 1.0, holds=Holds.ROOT_BUFFER, in_place=InPlace.ALWAYS,
                   rooted=True, latency_steps=lambda n: n - 1, nccl=("ring",), built=("chain", "binomial")),
        Collective("reduce", busbw_factor=lambda n: 1.0, holds=Holds.REDUCTION, in_place=InPlace.ALWAYS, reduces=True,
                   rooted=True, checked_on_root=True, latency_steps=lambda n: n - 1, nccl=("ring",)),
        Collective("gather", busbw_factor=_ring, holds=Holds.ALL_CHUNKS, chunked=True, rooted=True,
                   checked_on_root=True),
        Collective("scatter", busbw_factor=_ring, holds=Holds.ROOT_CHUNK, chunked=True, rooted=True),
        Collective("pt2pt", busbw_factor=lambda n: 1.0, holds=Holds.PEER_BUFFER, paired=True, min_ranks=2,
                   latency_steps=lambda n: 1),
        # Both directions at once: busbw counts the bytes moving both ways (docs/methodology.md §1).
        Collective("pt2pt_bidir", busbw_factor=lambda n: 2.0, holds=Holds.PEER_BUFFER, paired=True,
                   bidirectional=True, min_ranks=2, in_all=False),
        # --pattern ring: each rank sends to the next and receives from the previous at once, so on a
        # multi-node job every node boundary is crossed (pt2pt's pairs 0-1, 2-3 never are).
        Collective("sendrecv", busbw_factor=lambda n: 1.0, holds=Holds.PREVIOUS_BUFFER, min_ranks=2, in_all=False),
        # --pattern incast: every rank sends Size bytes to the root at once (the congestion case);
        # busbw is what arrives at the root per second.
        Collective("incast", busbw_factor=lambda n: n - 1.0, holds=Holds.SENDERS_BUFFERS, rooted=True,
                   checked_on_root=True, min_ranks=2, in_all=False),
    )
}

# `--ops all`: each collective once; pt2pt's direction comes from --bidirectional, the ring and incast
# patterns are asked for by name or by --pattern.
ALL_OPS = tuple(name for name, c in COLLECTIVES.items() if c.in_all)
# Every algorithm --algo knows, the backend's own op first.
BUILT_ALGORITHMS = (NATIVE, *dict.fromkeys(a for c in COLLECTIVES.values() for a in c.built))


def implements(algo: str, op: str) -> bool:
    """Whether `algo` (native, or one built from send/recv) can stand for `op`."""
    return algo == NATIVE or algo in COLLECTIVES[op].built


def nccl_ops(algo: str) -> tuple[str, ...]:
    """The collectives NCCL runs with the forced algorithm `algo`."""
    return tuple(name for name, c in COLLECTIVES.items() if algo in c.nccl)
