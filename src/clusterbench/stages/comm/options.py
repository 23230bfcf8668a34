"""The comm sweep's options as `clusterbench comm` parses them: names and values checked as typed.

Torch-free, so that building any command's parser costs nothing: the vocabulary of every choice
(ops, reductions, dtypes, timings, scopes, patterns, algorithms) is named here or in
clusterbench.collectives, and stages/comm/plan.py resolves what was asked into the sweep to run.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass

from clusterbench import argtypes
from clusterbench.argtypes import option
from clusterbench.collectives import ALL_OPS, BUILT_ALGORITHMS, COLLECTIVES, NCCL_ALGORITHMS, REDUCE_OPS
from clusterbench.results.codec import AT_LEAST_ONE, MESSAGE_BYTES, NONNEGATIVE, POSITIVE, bounds
from clusterbench.units import BANDWIDTH_UNITS

DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8")
DTYPE_ALIASES = {"fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16",
                 "fp64": "float64", "double": "float64", "float": "float32"}
RANK_TIME = ("max", "avg", "min")
TIMINGS = ("stamps", "loop", "graph")
SCOPES = ("global", "intra", "inter")
# What a scope narrower than the whole job needs of it to have anything to measure.
SCOPE_NEEDS = {"intra": "needs a node with at least two ranks", "inter": "needs at least two nodes"}
# The patterns that are one op of the sweep; pairwise measures pairs instead.
PATTERN_OPS = {"single": None, "ring": "sendrecv", "incast": "incast"}


def ops_list(text: str) -> tuple[str, ...]:
    names = ALL_OPS if text.strip() == "all" else argtypes.names(text, "op")
    unknown = [n for n in names if n not in COLLECTIVES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown op {argtypes.clipped(', '.join(unknown))!r}: choose from {', '.join(ALL_OPS)} or all")
    return tuple(dict.fromkeys(names))


def _choices(text: str, known: Iterable[str], what: str) -> tuple[str, ...]:
    """A comma-separated list of names, each one of `known` (case-insensitive), in the order given."""
    known = tuple(known)
    names = tuple(dict.fromkeys(n.lower() for n in argtypes.names(text, what)))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {what} {argtypes.clipped(', '.join(unknown))!r}: "
                                         f"choose from {', '.join(known)}")
    return names


def nccl_algos(text: str) -> tuple[str, ...]:
    return _choices(text, NCCL_ALGORITHMS, "NCCL algorithm")


def algo_list(text: str) -> tuple[str, ...]:
    return _choices(text, BUILT_ALGORITHMS, "algorithm")


def dtype_name(text: str) -> str:
    name = DTYPE_ALIASES.get(text, text)
    if name not in DTYPES:
        raise argparse.ArgumentTypeError(f"unknown dtype {argtypes.clipped(text)!r}: choose from {', '.join(DTYPES)}")
    return name


@dataclass(frozen=True)
class CommOptions:
    """The comm sweep as asked for, each option declared once (defaults: `clusterbench comm`'s own), as run.json
    keeps it (`comm_options`)."""

    ops: tuple[str, ...] = option(("all_reduce",), "--ops", type=ops_list, help="comma-separated ops, or 'all'")
    bidirectional: bool = option(False, "--bidirectional", action="store_true", help="pt2pt: send both ways at once")
    min_bytes: int = option(8, "-b", "--min-bytes", type=argtypes.size, meta=MESSAGE_BYTES,
                            help="smallest message (suffixes K, M, G)")
    max_bytes: int | None = option(None, "-e", "--max-bytes", type=argtypes.size, meta=MESSAGE_BYTES,
                                   help="largest message", shown="64M on CPU, 1G on GPU capped by free memory")
    step_factor: float = option(2.0, "-f", "--step-factor", type=argtypes.real(1.0), meta=bounds(1),
                                help="size multiplier per step")
    dtype: str = option("float32", "--dtype", type=dtype_name, help=f"one of {', '.join(DTYPES)}")
    reduce_op: str = option("sum", "--reduce-op", choices=tuple(REDUCE_OPS), help="the reduction")
    in_place: bool = option(False, "--in-place", action="store_true", help="run all_gather / reduce_scatter in place")
    root: int = option(0, "--root", type=argtypes.whole(0), meta=NONNEGATIVE,
                       help="root rank of broadcast, reduce, gather, scatter")
    iters: int | None = option(None, "--iters", type=argtypes.auto_or(argtypes.whole(1)), meta=AT_LEAST_ONE,
                               help="timed iterations per size, or auto", shown="auto")
    warmup: int = option(5, "--warmup", type=argtypes.whole(1), meta=NONNEGATIVE,
                         help="warm-up iterations per size, at least 1")
    time_budget_s: float = option(0.05, "--time-budget", type=argtypes.real(0.0), meta=POSITIVE,
                                  help="--iters auto: seconds of timed iterations per size at most")
    rank_time: str = option("max", "--rank-time", choices=RANK_TIME, help="how per-rank times combine (max: the "
                            "slowest)")
    timing: str | None = option(None, "--timing", choices=TIMINGS, shown="loop on GPU, stamps on CPU",
                                help="stamps: a clock read per call (p50/p99 per call); loop: one around a batch "
                                     "(nccl-tests' default); graph: the batch as a CUDA graph (GPU, NCCL)")
    check: bool = option(True, "--check", action=argparse.BooleanOptionalAction,
                         help="verify every output element after timing")
    rotate: bool = option(True, "--rotate", action=argparse.BooleanOptionalAction,
                          help="move the buffers' offset every call through memory of the largest size, so that "
                               "sizes that fit in a cache are not timed warm, as nccl-tests does")
    unit: str = option("Gbps", "--unit", choices=tuple(BANDWIDTH_UNITS), help="bandwidth unit")
    scope: str = option("global", "--scope", choices=(*SCOPES, "all"), group="many nodes",
                        help="global: the whole job; intra: inside each node, all nodes at once; inter: one rank "
                             "per node, rail by rail; all: the three in turn")
    pattern: str = option("single", "--pattern", choices=tuple(PATTERN_OPS) + ("pairwise",), group="many nodes",
                          help="single: the sweep; ring: each rank sends to the next (sendrecv); incast: all send to "
                               "--root; pairwise: every pair alone, each way, to find the slow one")
    flag_below: float = option(0.8, "--flag-below", type=argtypes.real(0.0, maximum=1.0), meta=NONNEGATIVE,
                               group="many nodes",
                               help="pairwise: flag a pair, rank or node below this fraction of its class's median")
    nodes_only: bool = option(False, "--nodes-only", action="store_true", group="many nodes",
                              help="pairwise: one rank per node, for large fleets")
    nccl_algos: tuple[str, ...] = option((), "--nccl-algo", type=nccl_algos, group="many nodes", shown="",
                                         help=f"NCCL: sweep once per algorithm, side by side "
                                              f"({', '.join(NCCL_ALGORITHMS)}; comma-separated)")
    algos: tuple[str, ...] = option(("native",), "--algo", type=algo_list,
                                    help=f"the native op and/or collectives built from send/recv, side by side "
                                         f"({', '.join(BUILT_ALGORITHMS)}; comma-separated)")

