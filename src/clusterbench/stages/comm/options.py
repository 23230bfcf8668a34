"""The comm sweep's options as `clusterbench comm` parses them: names and values checked as typed.

Torch-free, so that building any command's parser costs nothing: the vocabulary of every choice
(ops, reductions, dtypes, timings, scopes, patterns, algorithms) is named here or in
clusterbench.collectives, and comm/plan.py resolves what was asked into the sweep to run.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from clusterbench import argtypes
from clusterbench.collectives import ALL_OPS, BUILT_ALGORITHMS, COLLECTIVES, NCCL_ALGORITHMS, REDUCE_OPS
from clusterbench.stages.comm.records import CommOptions
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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ops", type=ops_list, help="comma-separated ops, or 'all' (default: all_reduce)")
    p.add_argument("-b", "--min-bytes", dest="min_bytes", type=argtypes.size,
                   help="smallest message (suffixes K, M, G; default 8)")
    p.add_argument("-e", "--max-bytes", dest="max_bytes", type=argtypes.size,
                   help="largest message (default 64M on CPU, 1G on GPU capped by free memory)")
    p.add_argument("-f", "--step-factor", dest="step_factor", type=argtypes.real(1.0),
                   help="size multiplier per step (default 2)")
    p.add_argument("--dtype", type=dtype_name, help="default float32")
    p.add_argument("--reduce-op", choices=tuple(REDUCE_OPS), help="default sum")
    p.add_argument("--in-place", action="store_true", help="run all_gather / reduce_scatter in place")
    p.add_argument("--root", type=argtypes.whole(0), help="root rank of broadcast, reduce, gather, scatter")
    p.add_argument("--bidirectional", action="store_true", help="pt2pt: send both ways at once")
    p.add_argument("--iters", type=argtypes.auto_or(argtypes.whole(1)),
                   help="timed iterations per size, or auto (default)")
    p.add_argument("--warmup", type=argtypes.whole(1), help="warm-up iterations per size, at least 1 (default 5)")
    p.add_argument("--time-budget", dest="time_budget_s", type=argtypes.real(0.0),
                   help=f"--iters auto: seconds of timed iterations per size at most "
                        f"(default {CommOptions.time_budget_s:g})")
    p.add_argument("--rank-time", choices=RANK_TIME, help="how per-rank times combine (default max: the slowest)")
    p.add_argument("--timing", choices=TIMINGS,
                   help="stamps: a clock read per call (p50/p99 per call); loop: one around a batch (nccl-tests' "
                        "default); graph: the batch as a CUDA graph (GPU, NCCL). Default: loop on GPU, stamps on CPU")
    p.add_argument("--rotate", action=argparse.BooleanOptionalAction,
                   help="move the buffers' offset every call through memory of the largest size, so that sizes "
                        "that fit in a cache are not timed warm, as nccl-tests does (default on)")
    p.add_argument("--check", action=argparse.BooleanOptionalAction,
                   help="verify every output element after timing (default on)")
    p.add_argument("--unit", choices=tuple(BANDWIDTH_UNITS), help="bandwidth unit (default Gbps)")
    g = p.add_argument_group("many nodes")
    g.add_argument("--scope", choices=(*SCOPES, "all"),
                   help="global: the whole job (default); intra: inside each node, all nodes at once; "
                        "inter: one rank per node, rail by rail; all: the three in turn")
    g.add_argument("--pattern", choices=tuple(PATTERN_OPS) + ("pairwise",),
                   help="single: the sweep (default); ring: each rank sends to the next (sendrecv); "
                        "incast: all send to --root; pairwise: every pair alone, each way, to find the slow one")
    g.add_argument("--flag-below", dest="flag_below", type=argtypes.real(0.0, maximum=1.0),
                   help="pairwise: flag a pair, rank or node below this fraction of its class's median (default 0.8)")
    g.add_argument("--nodes-only", dest="nodes_only", action="store_true",
                   help="pairwise: one rank per node, for large fleets")
    p.add_argument("--algo", dest="algos", type=algo_list,
                   help=f"the native op and/or collectives built from send/recv, side by side "
                        f"({', '.join(BUILT_ALGORITHMS)}; comma-separated; default native)")
    g.add_argument("--nccl-algo", dest="nccl_algos", type=nccl_algos,
                   help=f"NCCL: sweep once per algorithm, side by side ({', '.join(NCCL_ALGORITHMS)}; comma-separated)")
