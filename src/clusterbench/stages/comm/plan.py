"""The comm sweep resolved once, before any rank starts: ops, sizes, scopes and timing decided here.

What the user asked for stays a CommOptions (run.json records it); what the sweep runs is a
CommPlan, derived from it once for this job's world size, device and backend, and refused in
one line when it cannot work, so no rank ever re-derives a choice or finds a fault late.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from clusterbench.collectives import BUILT_REDUCTIONS, COLLECTIVES, NATIVE, implements, nccl_ops
from clusterbench.errors import UsageError
from clusterbench.hw.host import meminfo_bytes
from clusterbench.shape import JobShape
from clusterbench.stages.comm.options import PATTERN_OPS, SCOPE_NEEDS, SCOPES
from clusterbench.stages.comm.records import CommOptions
from clusterbench.stages.comm.sizes import SCRATCH_BYTES, geometric
from clusterbench.units import human_bytes

MAX_BYTES = {"cpu": 64 * 1024**2, "cuda": 1024**3}
# The most message sizes one sweep takes: 1 B to 16 GiB in steps of 2.5 % (a minute or more per op at
# the default time budget). A step factor barely above 1 would otherwise plan billions of sizes.
MAX_STEPS = 1000


@dataclass(frozen=True)
class CommPlan:
    options: CommOptions  # as asked for
    ops: tuple[str, ...]  # op table entries in order: --bidirectional made pt2pt its two-way entry
    sizes: tuple[int, ...]  # the requested message sizes in bytes; each op rounds them to whole elements
    fit_memory: bool  # the default GPU sweep drops the sizes the devices cannot hold; an explicit -e is obeyed
    scopes: tuple[str, ...]  # in turn; "algo" in place of "global" with --nccl-algo
    timing: str  # stamps, loop or graph
    rotate: bool  # each call's buffers at the next offset of memory of the largest size (nccl-tests)


def resolve(opts: CommOptions, typed: frozenset[str], job: JobShape) -> CommPlan:
    """The sweep to run for this job; `typed` names the options the user typed (not defaults)."""
    pattern_op = PATTERN_OPS.get(opts.pattern)
    if pattern_op is not None:
        if "ops" in typed:
            raise UsageError(f"--pattern {opts.pattern} measures the {pattern_op} op: drop --ops, or use --ops "
                             f"{pattern_op}")
        opts = replace(opts, ops=(pattern_op,))
    if opts.nodes_only and opts.pattern != "pairwise":
        raise UsageError("--nodes-only belongs to --pattern pairwise")
    ops = tuple("pt2pt_bidir" if opts.bidirectional and n == "pt2pt" else n for n in opts.ops)
    max_bytes = opts.max_bytes or MAX_BYTES.get(job.device_type, MAX_BYTES["cpu"])
    _check_steps(opts.min_bytes, max_bytes, opts.step_factor)
    sizes = tuple(geometric(opts.min_bytes, max_bytes, opts.step_factor))
    scopes = SCOPES if opts.scope == "all" else (opts.scope,)
    plan = CommPlan(
        options=opts, ops=ops, sizes=sizes, fit_memory=opts.max_bytes is None and job.device_type == "cuda",
        scopes=tuple("algo" if s == "global" and opts.nccl_algos else s for s in scopes),
        # A clock read per call costs a launch's worth of time on a GPU; a perf_counter read is nothing
        # next to a gloo call.
        timing=opts.timing or ("loop" if job.device_type == "cuda" else "stamps"),
        rotate=opts.rotate,
    )
    _validate(plan, job)
    return plan


def _check_steps(min_bytes: int, max_bytes: int, factor: float) -> None:
    if min_bytes > max_bytes:
        return  # geometric() says so
    steps = math.floor(math.log(max_bytes / min_bytes) / math.log(factor)) + 1
    if steps > MAX_STEPS:
        raise UsageError(f"--step-factor {factor} takes {steps:,} steps from {human_bytes(min_bytes)} to "
                         f"{human_bytes(max_bytes)}; at most {MAX_STEPS}: a larger factor or a narrower range")


def _validate(plan: CommPlan, job: JobShape) -> None:
    """Refuse what cannot work at this world size or on this machine."""
    opts = plan.options
    if opts.nccl_algos and job.backend != "nccl":
        raise UsageError(f"--nccl-algo chooses NCCL's algorithm; this run uses backend {job.backend or 'other'}")
    for algo in opts.nccl_algos:
        cannot = [name for name in plan.ops if name not in nccl_ops(algo)]
        if cannot:
            raise UsageError(f"--nccl-algo {algo}: NCCL runs only {', '.join(nccl_ops(algo))} with it, not "
                             f"{', '.join(cannot)}; choose --ops accordingly")
    _validate_algos(plan)
    if opts.timing == "graph" and (job.device_type != "cuda" or job.backend != "nccl"):
        raise UsageError(f"--timing graph replays CUDA graphs of NCCL calls; this run is {job.backend or 'no'} "
                         f"backend on {job.device_type}: use --timing loop or stamps")
    if not 0 <= opts.root < job.world_size:
        raise UsageError(f"--root {opts.root} is not a rank of this {job.world_size}-rank job")
    if opts.pattern == "pairwise" and job.world_size < 2:
        raise UsageError("--pattern pairwise needs at least 2 ranks; this job has 1")
    if opts.scope in SCOPE_NEEDS and job.world_size < 2:
        raise UsageError(f"--scope {opts.scope} {SCOPE_NEEDS[opts.scope]}; this job has 1 rank")
    for name in plan.ops:
        if job.world_size < COLLECTIVES[name].min_ranks:
            raise UsageError(f"{name} needs at least {COLLECTIVES[name].min_ranks} ranks; this job has "
                             f"{job.world_size}")
    if job.local_ranks is not None:
        check_memory(max(plan.sizes), job.local_ranks, job.device_type)


def _validate_algos(plan: CommPlan) -> None:
    """Each send/recv algorithm must implement one of the chosen ops; the others are skipped for it."""
    opts = plan.options
    built = [a for a in opts.algos if a != NATIVE]
    if not built:
        return
    if opts.nccl_algos:
        raise UsageError("--algo and --nccl-algo both put algorithms side by side: choose one")
    for algo in built:
        if not any(implements(algo, name) for name in plan.ops):
            raise UsageError(f"--algo {algo} implements none of {', '.join(plan.ops)}; choose --ops accordingly")
    reducing = [name for name in plan.ops
                if COLLECTIVES[name].reduces and any(implements(a, name) for a in built)]
    if reducing and opts.reduce_op not in BUILT_REDUCTIONS:
        raise UsageError(f"--algo {','.join(built)} reduces with {', '.join(BUILT_REDUCTIONS)}, not {opts.reduce_op}")


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
