"""The sweep: every op x every size, timed, checked, one CommRow out per size."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from functools import partial

import torch

from clusterbench import faults
from clusterbench.comm import table
from clusterbench.comm.ops import ALL_OPS, OPS, REDUCE_OPS, Ctx, InPlace, Op
from clusterbench.comm.sizes import count_for, human
from clusterbench.comm.timing import RankReducer, time_op
from clusterbench.comm.values import DTYPE_ALIASES, DTYPES, Values, dtype_named
from clusterbench.dist import Worker, environment, synchronize
from clusterbench.errors import RunFailed, UsageError
from clusterbench.launch import Progress
from clusterbench.results import COMM_COLUMNS, CommRow, RunFolder


@dataclass(frozen=True)
class CommOptions:
    ops: tuple[str, ...]
    sizes: tuple[int, ...]  # requested bytes; each op rounds to whole elements and chunks
    dtype: str = "float32"
    reduce_op: str = "sum"
    in_place: bool = False
    root: int = 0
    iters: int | None = None  # None: auto
    warmup: int = 5
    time_budget_s: float = 0.25
    rank_time: str = "max"
    check: bool = True
    unit: str = "Gbps"
    fit_device_memory: bool = False  # the default GPU sweep: drop sizes the devices cannot hold


def parse_ops(text: str, bidirectional: bool = False) -> tuple[str, ...]:
    names = ALL_OPS if text.strip() == "all" else [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in OPS]
    if unknown or not names:
        raise UsageError(f"unknown op {', '.join(unknown) or text!r}: choose from {', '.join(ALL_OPS)} or all")
    if bidirectional:
        names = ["pt2pt_bidir" if n == "pt2pt" else n for n in names]
    return tuple(dict.fromkeys(names))


def validate(opts: CommOptions, world_size: int) -> None:
    """Refuse, before any collective runs, what cannot work at this world size."""
    if DTYPE_ALIASES.get(opts.dtype, opts.dtype) not in DTYPES:
        raise UsageError(f"unknown dtype {opts.dtype!r}: choose from {', '.join(DTYPES)}")
    if opts.reduce_op not in REDUCE_OPS:
        raise UsageError(f"unknown reduce op {opts.reduce_op!r}: choose from {', '.join(REDUCE_OPS)}")
    if not 0 <= opts.root < world_size:
        raise UsageError(f"--root {opts.root} is not a rank of this {world_size}-rank job")
    for name in opts.ops:
        if world_size < OPS[name].min_ranks:
            raise UsageError(f"{name} needs at least {OPS[name].min_ranks} ranks; this job has {world_size}")
    if opts.iters is not None and opts.iters < 1:
        raise UsageError(f"--iters must be a positive number or auto, got {opts.iters}")
    if opts.warmup < 1:
        raise UsageError(f"--warmup must be at least 1, got {opts.warmup}")


def _ctx(op: Op, worker: Worker, opts: CommOptions, count: int, zeros: bool) -> Ctx:
    dtype = dtype_named(opts.dtype)
    reduce_op = opts.reduce_op if op.reduces else None
    return Ctx(
        rank=worker.rank, n=worker.world_size, count=count, dtype=dtype, device=worker.device,
        root=opts.root, reduce_op=opts.reduce_op,
        in_place=op.in_place is InPlace.ALWAYS or (opts.in_place and op.in_place is InPlace.OPTIONAL),
        values=Values(dtype, worker.device, reduce_op, worker.world_size, zeros),
    )


def _allocate(op: Op, ctx: Ctx) -> dict[str, torch.Tensor]:
    try:
        return op.buffers(ctx)
    except (torch.OutOfMemoryError, RuntimeError) as e:
        if "memory" not in str(e).lower() and not isinstance(e, torch.OutOfMemoryError):
            raise
        size = human(ctx.count * ctx.values.dtype.itemsize)
        raise UsageError(f"{op.name} {size}: out of memory on {ctx.device}; lower --max-bytes") from None


def probe(worker: Worker, opts: CommOptions) -> None:
    """Run each op once on a few elements: the backend refuses unsupported dtypes/reductions here."""
    for name in opts.ops:
        op = OPS[name]
        ctx = _ctx(op, worker, opts, op.granularity(worker.world_size), zeros=False)
        try:
            op.run(ctx, op.buffers(ctx))
            synchronize(worker.device)
        except (RuntimeError, ValueError, TypeError) as e:
            what = f"{opts.dtype} with reduce op {opts.reduce_op}" if op.reduces else opts.dtype
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UsageError(f"backend {worker.backend} cannot run {name} on {what}: {reason}") from None


def check(op: Op, ctx: Ctx) -> int:
    """Run once on the check values and count wrong elements on this rank."""
    bufs = _allocate(op, ctx)
    op.run(ctx, bufs)
    synchronize(ctx.device)
    want = op.expected(ctx)
    if want is None:
        return 0
    faults.corrupt(op.name, ctx.rank, bufs["out"])
    return ctx.values.mismatches(bufs["out"], want)


def sizes_for(op: Op, opts: CommOptions, world_size: int) -> list[int]:
    elem = dtype_named(opts.dtype).itemsize
    gran = op.granularity(world_size)
    return sorted({count_for(s, elem, gran) for s in opts.sizes})


def measure(op: Op, worker: Worker, opts: CommOptions, count: int) -> CommRow:
    """Time one op at one element count, then check it; identical on every rank."""
    n = worker.world_size
    ctx = _ctx(op, worker, opts, count, zeros=True)
    bufs = _allocate(op, ctx)
    reducer = RankReducer(
        opts.rank_time, worker.device,
        active_ranks=sum(op.active(r, n) for r in range(n)), active=op.active(worker.rank, n),
    )
    stats = time_op(partial(op.run, ctx, bufs), worker.device, reducer, opts.iters, opts.warmup, opts.time_budget_s)
    del bufs  # free the timing buffers before the check allocates its own
    wrong = 0
    if opts.check:
        wrong_t = torch.tensor([check(op, _ctx(op, worker, opts, count, zeros=False))], device=worker.device)
        torch.distributed.all_reduce(wrong_t)
        wrong = int(wrong_t.item())
    size = count * ctx.values.dtype.itemsize
    algbw = size / stats.mean_s
    return CommRow(
        op=op.name, size_bytes=size, count=count, dtype=opts.dtype, world_size=n,
        in_place=ctx.in_place, duration_us=stats.mean_s * 1e6,
        throughput_gbps=algbw * 8 / 1e9,
        busbw_gbps=algbw * op.busbw_factor(n) * 8 / 1e9 if n > 1 else 0.0,
        wrong=wrong, iters=stats.iters, p50_us=stats.p50_s * 1e6, p99_us=stats.p99_s * 1e6,
        min_us=stats.min_s * 1e6, max_us=stats.max_s * 1e6, cv=stats.cv,
        reduce_op=opts.reduce_op if op.reduces else None,
        root=opts.root if op.name in ("broadcast", "reduce", "gather", "scatter") else None,
    )


def sweep(worker: Worker, opts: CommOptions, progress: Progress) -> Iterator[tuple[Op, CommRow]]:
    plan = [(OPS[name], count) for name in opts.ops for count in sizes_for(OPS[name], opts, worker.world_size)]
    for i, (op, count) in enumerate(plan, 1):
        where = f"{op.name} {count * dtype_named(opts.dtype).itemsize} B"
        progress.at(where)
        faults.at_step(worker.rank, i)
        if worker.is_main and sys.stderr.isatty():
            print(f"\r[{i}/{len(plan)}] {where} ...", end="", file=sys.stderr, flush=True)
        row = measure(op, worker, opts, count)
        if worker.is_main and sys.stderr.isatty():
            print("\r\033[K", end="", file=sys.stderr, flush=True)
        yield op, row


def fit_to_memory(worker: Worker, opts: CommOptions) -> CommOptions:
    """Cap the sweep at a power of two <= a quarter of the free memory of the fullest device.

    Measured on every rank after it owns its device, and agreed on with a MIN, so every rank
    sweeps the same sizes."""
    if not opts.fit_device_memory or worker.device.type != "cuda":
        return opts
    free = torch.tensor([torch.cuda.mem_get_info(worker.device)[0]], dtype=torch.int64, device=worker.device)
    torch.distributed.all_reduce(free, op=torch.distributed.ReduceOp.MIN)
    cap = 1 << max(3, (int(free.item()) // 4).bit_length() - 1)
    return replace(opts, sizes=tuple(s for s in opts.sizes if s <= cap) or (min(opts.sizes),))


def run_comm(worker: Worker, opts: CommOptions, progress: Progress, folder: RunFolder | None) -> list[CommRow]:
    """The benchmark on every rank; rank 0 prints and records each row as it arrives."""
    validate(opts, worker.world_size)
    opts = fit_to_memory(worker, opts)
    env = environment(worker)
    if folder is not None:
        folder.update_env(env)
        folder.set("comm_options", asdict(opts))
    probe(worker, opts)
    main = worker.is_main
    if main:
        print(f"# clusterbench comm: {worker.world_size} ranks, backend {worker.backend}, "
              f"device {env['devices'][0]}, {opts.dtype}", flush=True)
    rows: list[CommRow] = []
    current = None
    for op, row in sweep(worker, opts, progress):
        if main and op.name != current:
            if current is not None:
                print(table.summary(current, [r for r in rows if r.op == current], opts.unit, opts.check))
            current = op.name
            print(table.header(op.name, opts.unit), flush=True)
        rows.append(row)
        if main:
            print(table.line(row, opts.unit, opts.check), flush=True)
            if folder is not None:
                folder.append("comm", row, COMM_COLUMNS)
    if main and current is not None:
        print(table.summary(current, [r for r in rows if r.op == current], opts.unit, opts.check), flush=True)
    bad = [r for r in rows if r.wrong]
    if bad:
        where = ", ".join(f"{r.op} {r.size_bytes} B ({r.wrong} wrong)" for r in bad[:5])
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise RunFailed(f"correctness check failed: {where}{more}")
    return rows
