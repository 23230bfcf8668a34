"""The comm sweep's options: parsed into a typed CommOptions, resolved for the hardware, refused early.

Defaults come in layers: CommOptions' own (those of `clusterbench comm`), then a caller's
(`clusterbench run` sets its own per hardware), then what the user typed. A default is never
passed on as if the user had typed it: an unset --max-bytes on a GPU keeps its cap at the
devices' free memory.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from clusterbench import args as argtypes
from clusterbench.comm.algos import ALGO_NAMES, COMBINE, NATIVE, implements
from clusterbench.comm.ops import ALL_OPS, OPS, REDUCE_OPS
from clusterbench.comm.scopes import NCCL_ALGOS, SCOPES
from clusterbench.comm.sizes import sweep
from clusterbench.comm.timing import RANK_TIME, TIMINGS
from clusterbench.comm.values import DTYPE_ALIASES, DTYPES, SCRATCH_BYTES
from clusterbench.errors import UsageError
from clusterbench.hw.host import meminfo_bytes
from clusterbench.results.schema import CommOptions
from clusterbench.units import BANDWIDTH_UNITS, human_bytes

MAX_BYTES = {"cpu": 64 * 1024**2, "cuda": 1024**3}


def ops_list(text: str) -> tuple[str, ...]:
    names = ALL_OPS if text.strip() == "all" else [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in OPS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown op {', '.join(unknown) or text!r}: choose from {', '.join(ALL_OPS)} or all")
    return tuple(dict.fromkeys(names))


def _choices(text: str, known: Iterable[str], what: str) -> tuple[str, ...]:
    """A comma-separated list of names, each one of `known` (case-insensitive), in the order given."""
    known = tuple(known)
    names = tuple(dict.fromkeys(t.strip().lower() for t in text.split(",") if t.strip()))
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(unknown) or text!r}: "
                                         f"choose from {', '.join(known)}")
    return names


def nccl_algos(text: str) -> tuple[str, ...]:
    return _choices(text, NCCL_ALGOS, "NCCL algorithm")


def algo_list(text: str) -> tuple[str, ...]:
    return _choices(text, ALGO_NAMES, "algorithm")


def dtype_name(text: str) -> str:
    name = DTYPE_ALIASES.get(text, text)
    if name not in DTYPES:
        raise argparse.ArgumentTypeError(f"unknown dtype {text!r}: choose from {', '.join(DTYPES)}")
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
    p.add_argument("--warmup", type=argtypes.whole(1), help="warm-up iterations per size (default 5)")
    p.add_argument("--time-budget", dest="time_budget_s", type=argtypes.real(0.0),
                   help="--iters auto: seconds of timed iterations per size at most (default 0.25)")
    p.add_argument("--rank-time", choices=RANK_TIME, help="how per-rank times combine (default max: the slowest)")
    p.add_argument("--timing", choices=TIMINGS,
                   help="stamps: a clock read per call (p50/p99 per call); loop: one around a batch (nccl-tests' "
                        "default); graph: the batch as a CUDA graph (GPU, NCCL). Default: loop on GPU, stamps on CPU")
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
    g.add_argument("--flag-below", dest="flag_below", type=argtypes.real(0.0),
                   help="pairwise: flag a pair, rank or node below this fraction of its class's median (default 0.8)")
    g.add_argument("--nodes-only", dest="nodes_only", action="store_true",
                   help="pairwise: one rank per node, for large fleets")
    p.add_argument("--algo", dest="algos", type=algo_list,
                   help=f"the native op and/or collectives built from send/recv, side by side "
                        f"({', '.join(ALGO_NAMES)}; comma-separated; default native)")
    g.add_argument("--nccl-algo", dest="nccl_algos", type=nccl_algos,
                   help=f"NCCL: sweep once per algorithm, side by side ({', '.join(NCCL_ALGOS)}; comma-separated)")


# The patterns that are one op of the sweep.
PATTERN_OPS = {"single": None, "ring": "sendrecv", "incast": "incast"}


def build(given: dict[str, Any], defaults: dict[str, Any] | None = None) -> CommOptions:
    """CommOptions from the user's options over a caller's defaults over the command's own."""
    opts = replace(CommOptions(), **{**(defaults or {}), **given})
    op = PATTERN_OPS.get(opts.pattern)
    if op is not None:
        if "ops" in given:
            raise UsageError(f"--pattern {opts.pattern} measures the {op} op: drop --ops, or use --ops {op}")
        opts = replace(opts, ops=(op,))
    if opts.nodes_only and opts.pattern != "pairwise":
        raise UsageError("--nodes-only belongs to --pattern pairwise")
    if not 0 < opts.flag_below <= 1:
        raise UsageError(f"--flag-below is a fraction of the median in (0, 1], got {opts.flag_below:g}")
    return opts


def scope_names(opts: CommOptions) -> tuple[str, ...]:
    """The scopes to run in turn; --nccl-algo puts the algorithms side by side in place of the global sweep."""
    names = SCOPES if opts.scope == "all" else (opts.scope,)
    return tuple("algo" if n == "global" and opts.nccl_algos else n for n in names)


def op_names(opts: CommOptions) -> list[str]:
    """The op table entries to run: --bidirectional turns pt2pt into its two-way entry."""
    return ["pt2pt_bidir" if opts.bidirectional and n == "pt2pt" else n for n in opts.ops]


def sizes(opts: CommOptions, device_type: str) -> list[int]:
    """The requested message sizes in bytes; each op rounds them to whole elements and chunks."""
    top = opts.max_bytes or MAX_BYTES.get(device_type, MAX_BYTES["cpu"])
    return sweep(opts.min_bytes, top, opts.step_factor)


def fits_device_memory(opts: CommOptions, device_type: str) -> bool:
    """The default GPU sweep drops the sizes the devices cannot hold; an explicit -e is obeyed."""
    return opts.max_bytes is None and device_type == "cuda"


def timing(opts: CommOptions, device_type: str) -> str:
    """The timing mode: the user's, else loop on GPUs (a clock read per call costs a launch's worth
    of time there) and stamps on CPUs (a perf_counter read is nothing next to a gloo call)."""
    return opts.timing or ("loop" if device_type == "cuda" else "stamps")


def validate(opts: CommOptions, world_size: int, device_type: str, local_ranks: int | None,
             backend: str = "") -> None:
    """Refuse, before any rank starts, what cannot work at this world size or on this machine."""
    if opts.nccl_algos and backend != "nccl":
        raise UsageError(f"--nccl-algo chooses NCCL's algorithm; this run uses backend {backend or 'other'}")
    for algo in opts.nccl_algos:
        cannot = [name for name in op_names(opts) if name not in NCCL_ALGOS[algo]]
        if cannot:
            raise UsageError(f"--nccl-algo {algo}: NCCL runs only {', '.join(NCCL_ALGOS[algo])} with it, not "
                             f"{', '.join(cannot)}; choose --ops accordingly")
    _validate_algos(opts)
    if opts.timing == "graph" and (device_type != "cuda" or backend != "nccl"):
        raise UsageError(f"--timing graph replays CUDA graphs of NCCL calls; this run is {backend or 'no'} "
                         f"backend on {device_type}: use --timing loop or stamps")
    if not 0 <= opts.root < world_size:
        raise UsageError(f"--root {opts.root} is not a rank of this {world_size}-rank job")
    if opts.pattern == "pairwise" and world_size < 2:
        raise UsageError("--pattern pairwise needs at least 2 ranks; this job has 1")
    for name in op_names(opts):
        if world_size < OPS[name].min_ranks:
            raise UsageError(f"{name} needs at least {OPS[name].min_ranks} ranks; this job has {world_size}")
    top = max(sizes(opts, device_type))
    if local_ranks is not None:
        check_memory(top, local_ranks, device_type)


def _validate_algos(opts: CommOptions) -> None:
    """Each send/recv algorithm must implement one of the chosen ops; the others are skipped for it."""
    built = [a for a in opts.algos if a != NATIVE]
    if not built:
        return
    if opts.nccl_algos:
        raise UsageError("--algo and --nccl-algo both put algorithms side by side: choose one")
    for algo in built:
        if not any(implements(algo, name) for name in op_names(opts)):
            raise UsageError(f"--algo {algo} implements none of {', '.join(op_names(opts))}; choose --ops accordingly")
    reducing = [name for name in op_names(opts) if OPS[name].reduces and any(implements(a, name) for a in built)]
    if reducing and opts.reduce_op not in COMBINE:
        raise UsageError(f"--algo {','.join(built)} reduces with {', '.join(COMBINE)}, not {opts.reduce_op}")


def check_memory(max_bytes: int, local_ranks: int, device_type: str) -> None:
    """Refuse a sweep that cannot fit in host memory before spawning anything."""
    if device_type != "cpu":
        return
    # Buffers in and out and the check's output, plus the check's bounded scratch.
    need = local_ranks * (max_bytes * 3 + SCRATCH_BYTES)
    avail = meminfo_bytes(key="MemAvailable")
    if avail and need > avail:
        raise UsageError(f"--max-bytes {human_bytes(max_bytes)} on {local_ranks} ranks needs about "
                         f"{human_bytes(need)} of memory; this machine has {human_bytes(avail)} available")
