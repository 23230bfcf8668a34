"""The sweep: every op x every size, timed, checked, one CommRow out per size."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from functools import partial

import torch

from clusterbench import faults
from clusterbench.comm import options, table
from clusterbench.comm.ops import OPS, Ctx, InPlace, Op
from clusterbench.comm.sizes import count_for
from clusterbench.comm.timing import RankReducer, time_op
from clusterbench.comm.values import Values, dtype_named
from clusterbench.dist import Worker, synchronize
from clusterbench.errors import UsageError
from clusterbench.rank import Progress, Rank
from clusterbench.results.schema import CommOptions, CommRow
from clusterbench.units import human_bytes


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
        size = human_bytes(ctx.count * ctx.values.dtype.itemsize)
        raise UsageError(f"{op.name} {size}: out of memory on {ctx.device}; lower --max-bytes") from None


def probe(worker: Worker, opts: CommOptions) -> None:
    """Run each op once on a few elements: the backend refuses unsupported dtypes/reductions here."""
    for name in options.op_names(opts):
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


def counts_for(op: Op, opts: CommOptions, sizes: list[int], world_size: int) -> list[int]:
    elem = dtype_named(opts.dtype).itemsize
    gran = op.granularity(world_size)
    return sorted({count_for(s, elem, gran) for s in sizes})


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


def sweep(worker: Worker, opts: CommOptions, sizes: list[int], progress: Progress) -> Iterator[tuple[Op, CommRow]]:
    plan = [(OPS[name], count) for name in options.op_names(opts)
            for count in counts_for(OPS[name], opts, sizes, worker.world_size)]
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


def fit_to_memory(worker: Worker, sizes: list[int]) -> list[int]:
    """Sizes up to a power of two <= a quarter of the free memory of the fullest device.

    Measured on every rank after it owns its device, and agreed on with a MIN, so every rank
    sweeps the same sizes."""
    free = torch.tensor([torch.cuda.mem_get_info(worker.device)[0]], dtype=torch.int64, device=worker.device)
    torch.distributed.all_reduce(free, op=torch.distributed.ReduceOp.MIN)
    cap = 1 << max(3, (int(free.item()) // 4).bit_length() - 1)
    return [s for s in sizes if s <= cap] or [min(sizes)]


def run_comm(rank: Rank, opts: CommOptions) -> None:
    """The benchmark on every rank; rank 0 prints and records each row as it arrives."""
    worker, folder = rank.worker, rank.folder
    sizes = options.sizes(opts, worker.device.type)
    if options.fits_device_memory(opts, worker.device.type):
        sizes = fit_to_memory(worker, sizes)
    if folder is not None:
        folder.record(comm_options=opts)
    probe(worker, opts)
    rank.say(f"# clusterbench comm: {worker.world_size} ranks, backend {worker.backend}, "
             f"device {rank.env.devices[0]}, {opts.dtype}")
    rows: list[CommRow] = []

    def close_table() -> None:
        done = rows[-1].op
        rank.say(table.summary(done, [r for r in rows if r.op == done], opts.unit, opts.check))

    for op, row in sweep(worker, opts, sizes, rank.progress):
        if not rows or rows[-1].op != op.name:
            if rows:
                close_table()
            rank.say(table.header(op.name, opts.unit))
        rows.append(row)
        rank.say(table.line(row, opts.unit, opts.check))
        if folder is not None:
            folder.append("comm", row)
    if rows:
        close_table()
