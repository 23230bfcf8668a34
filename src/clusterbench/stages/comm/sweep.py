"""The comm sweep on every rank: every op x every size of a resolved CommPlan, timed, checked,
one CommRow per size, printed and recorded by rank 0 as it arrives."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from typing import Any

import torch

from clusterbench import faults
from clusterbench.collectives import NATIVE, InPlace, implements
from clusterbench.errors import UsageError, is_out_of_memory
from clusterbench.runtime.devices import synchronize
from clusterbench.runtime.dist import Worker
from clusterbench.runtime.rank import Progress, Rank
from clusterbench.stages.comm import groups, rotation, scopes, table
from clusterbench.stages.comm.algos import variant
from clusterbench.stages.comm.links import network_line
from clusterbench.stages.comm.ops import OPS, Ctx, Op
from clusterbench.stages.comm.pairwise import run_pairwise
from clusterbench.stages.comm.plan import CommPlan
from clusterbench.stages.comm.records import COMM, CommOptions, CommRow
from clusterbench.stages.comm.scopes import Team
from clusterbench.stages.comm.sizes import count_for
from clusterbench.stages.comm.timing import RankReducer, time_op
from clusterbench.stages.comm.values import Values, dtype_named
from clusterbench.stages.hardware.records import HARDWARE


def _ctx(op: Op, worker: Worker, opts: CommOptions, count: int, zeros: bool, team: Team) -> Ctx:
    dtype = dtype_named(opts.dtype)
    reduce_op = opts.reduce_op if op.facts.reduces else None
    n = len(team.ranks)
    in_place = op.facts.in_place
    return Ctx(
        rank=team.rank_of(worker.rank), n=n, count=count, dtype=dtype, device=worker.device,
        root=opts.root, reduce_op=opts.reduce_op,
        in_place=in_place is InPlace.ALWAYS or (opts.in_place and in_place is InPlace.OPTIONAL),
        values=Values(dtype, worker.device, reduce_op, n, zeros),
        group=team.group, members=team.ranks if team.group is not None else (),
    )


def probe(worker: Worker, plan: CommPlan, team: Team) -> None:
    """Run each op once on a few elements: the backend refuses unsupported dtypes/reductions here."""
    opts = plan.options
    for name in plan.ops:
        op = OPS[name]
        ctx = _ctx(op, worker, opts, op.facts.granularity(worker.world_size), False, team)
        try:
            op.run(ctx, op.buffers(ctx))
            synchronize(worker.device)
        except (RuntimeError, ValueError, TypeError) as e:
            what = f"{opts.dtype} with reduce op {opts.reduce_op}" if op.facts.reduces else opts.dtype
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UsageError(f"backend {worker.backend} cannot run {name} on {what}: {reason}") from None


def check(op: Op, ctx: Ctx) -> int:
    """Run once on the check values and count wrong elements on this rank."""
    bufs = op.buffers(ctx)
    op.run(ctx, bufs)
    synchronize(ctx.device)
    want = op.expected(ctx, bufs)
    if want is None:
        return 0
    faults.corrupt(op.name, ctx.rank, bufs["out"])
    return ctx.values.mismatches(bufs["out"], want)


def counts_for(op: Op, opts: CommOptions, sizes: list[int], world_size: int) -> list[int]:
    elem = dtype_named(opts.dtype).itemsize
    gran = op.facts.granularity(world_size)
    return sorted({count_for(s, elem, gran) for s in sizes})


def _bookkeeping(team: Team) -> Any:
    """The group for the harness's own collectives (times, #wrong): the team's, except under a forced
    NCCL algorithm, which might not run them (NVLS and float64), so there the whole job's."""
    return None if team.nccl_algo else team.group


def measure(op: Op, worker: Worker, plan: CommPlan, count: int, team: Team, algo: str = NATIVE,
            arena: rotation.Arena | None = None) -> CommRow:
    """Time one op at one element count within a team, then check it; identical on the team's ranks.
    With an arena, each call takes the next window of it (stages/comm/rotation.py) where two fit."""
    opts = plan.options
    ctx = _ctx(op, worker, opts, count, True, team)
    n = ctx.n
    moving = rotation.windows(op, ctx, arena) if arena is not None else None
    run = rotation.rotating(op, ctx, moving) if moving else partial(op.run, ctx, op.buffers(ctx))
    reducer = RankReducer(
        opts.rank_time, worker.device,
        active_ranks=sum(op.facts.active(r, n) for r in range(n)), active=op.facts.active(ctx.rank, n),
        group=_bookkeeping(team),
    )
    stats = time_op(run, worker.device, reducer, opts.iters, opts.warmup, opts.time_budget_s, plan.timing)
    del run, moving  # free the timing buffers before the check allocates its own
    wrong = 0
    if opts.check:
        wrong_t = torch.tensor([check(op, _ctx(op, worker, opts, count, False, team))], device=worker.device)
        torch.distributed.all_reduce(wrong_t, group=_bookkeeping(team))
        wrong = int(wrong_t.item())
    size = count * ctx.values.dtype.itemsize
    algbw = size / stats.mean_s
    return CommRow(
        op=op.name, size_bytes=size, count=count, dtype=opts.dtype, world_size=n,
        in_place=ctx.in_place, duration_us=stats.mean_s * 1e6,
        throughput_gbps=algbw * 8 / 1e9,
        busbw_gbps=algbw * op.facts.busbw_factor(n) * 8 / 1e9 if n > 1 else 0.0,
        wrong=wrong, iters=stats.iters, p50_us=stats.p50_s * 1e6, p99_us=stats.p99_s * 1e6,
        min_us=stats.min_s * 1e6, max_us=stats.max_s * 1e6, cv=stats.cv,
        reduce_op=opts.reduce_op if op.facts.reduces else None,
        root=opts.root if op.facts.rooted else None,
        scope=team.scope, team=team.name, nodes=team.nodes, timing=plan.timing, algo=algo,
    )


def team_rows(worker: Worker, plan: CommPlan, sizes: list[int], team: Team,
              progress: Progress) -> Iterator[tuple[Op, CommRow]]:
    """Every op (and algorithm) at every size within one team, as each is measured."""
    n = len(team.ranks)
    # Lent to every size in turn and to the next op; the sizes too large to move leave it empty.
    arena = rotation.Arena(max(sizes), worker.device) if plan.rotate else None
    steps = [(variant(name, algo), _algo_team(team, algo), algo, count) for name in plan.ops
             for algo in _algos(plan.options, team) if implements(algo, name)
             for count in counts_for(OPS[name], plan.options, sizes, n)]
    for i, (op, where_team, algo, count) in enumerate(steps, 1):
        label = "" if where_team.scope == "global" else f" ({where_team.scope} {where_team.name})"
        where = f"{op.name} {count * dtype_named(plan.options.dtype).itemsize} B{label}"
        progress.at(where)
        faults.at_step(worker.rank, i)
        if worker.is_main and sys.stderr.isatty():
            print(f"\r[{i}/{len(steps)}] {where} ...", end="", file=sys.stderr, flush=True)
        try:
            row = measure(op, worker, plan, count, where_team, algo, arena)
        except (torch.OutOfMemoryError, RuntimeError) as e:
            if not is_out_of_memory(e):
                raise
            raise UsageError(f"{where}: out of memory on {worker.device} (the buffers, the timing or the check); "
                             "lower --max-bytes") from None
        if worker.is_main and sys.stderr.isatty():
            print("\r\033[K", end="", file=sys.stderr, flush=True)
        yield op, row


def _algos(opts: CommOptions, team: Team) -> tuple[str, ...]:
    """The send/recv algorithms run in the whole-job sweep only: the other scopes ask about the links."""
    return opts.algos if team.scope == "global" else (NATIVE,)


def _algo_team(team: Team, algo: str) -> Team:
    """A send/recv algorithm's rows go to scope "algo" under its name, as --nccl-algo's do, so they
    sit beside the native op in the table and the report and stay out of its metrics."""
    return team if algo == NATIVE else replace(team, scope="algo", name=algo)


def fit_to_memory(worker: Worker, sizes: list[int]) -> list[int]:
    """Sizes up to a power of two <= a quarter of the free memory of the fullest device.

    Measured on every rank after it owns its device, and agreed on with a MIN, so every rank
    sweeps the same sizes."""
    free = torch.tensor([torch.cuda.mem_get_info(worker.device)[0]], dtype=torch.int64, device=worker.device)
    torch.distributed.all_reduce(free, op=torch.distributed.ReduceOp.MIN)
    cap = 1 << max(3, (int(free.item()) // 4).bit_length() - 1)
    return [s for s in sizes if s <= cap] or [min(sizes)]


class _Printer:
    """Rank 0's tables: a header when the op (or team) changes, a line per row, a summary per table."""

    def __init__(self, rank: Rank, opts: CommOptions) -> None:
        self.rank, self.opts = rank, opts
        self.rows: list[CommRow] = []

    def add(self, row: CommRow) -> None:
        if not self.rows or (self.rows[-1].op, self.rows[-1].team) != (row.op, row.team):
            self.close()
            self.rank.say(table.header(row.op, self.opts.unit, _team_label(row), row.timing))
        self.rows.append(row)
        self.rank.say(table.line(row, self.opts.unit, self.opts.check))

    def close(self) -> None:
        if self.rows:
            last = self.rows[-1]
            done = [r for r in self.rows if (r.op, r.team) == (last.op, last.team)]
            what = last.op if last.algo == "native" else f"{last.op} ({last.algo})"
            self.rank.say(table.summary(what, done, self.opts.unit, self.opts.check))
        self.rows = []


def _team_label(row: CommRow) -> str:
    if row.scope == "global":
        return ""
    if row.algo != "native":
        return f"algorithm {row.algo} from send/recv, {row.world_size} ranks"
    return f"{row.scope}: {row.team}, {row.world_size} ranks on {row.nodes} node{'s' * (row.nodes > 1)}"


def sweep(rank: Rank, plan: CommPlan) -> None:
    """The benchmark on every rank; rank 0 prints and records each row as it arrives."""
    worker, folder, opts = rank.worker, rank.folder, plan.options
    if folder is not None:
        folder.record(comm_options=opts)
    if opts.pattern == "pairwise":
        run_pairwise(rank, opts)
        return
    sizes = fit_to_memory(worker, list(plan.sizes)) if plan.fit_memory else list(plan.sizes)
    whole = scopes.whole_job(list(worker.members))
    probe(worker, plan, whole)
    rank.say(f"# clusterbench comm: {worker.world_size} ranks on {whole.nodes} node(s), "
             f"backend {worker.backend}, device {rank.env.devices[0]}, {opts.dtype}")
    _sweep_scopes(rank, plan, sizes)
    if folder is not None:  # run.json holds every row now (the harness flushes a failed run)
        folder.flush()


def _sweep_scopes(rank: Rank, plan: CommPlan, sizes: list[int]) -> None:
    worker, folder, opts = rank.worker, rank.folder, plan.options
    printer = _Printer(rank, opts)
    for scope in plan.scopes:
        phases, why_not = (scopes.algo_phases(list(worker.members), opts.nccl_algos), None) if scope == "algo" \
            else scopes.plan(scope, list(worker.members))
        if why_not and len(plan.scopes) == 1:  # asked for alone, it would measure nothing and pass
            raise UsageError(f"--scope {scope}: {why_not}")
        if why_not:
            rank.say(f"# {scope}: skipped: {why_not}")
        _check_root(plan, phases)
        for phase in groups.with_groups(phases):
            with groups.nccl_algo(phase.teams[0].nccl_algo):  # and for a communicator set up on first use
                _run_phase(rank, plan, sizes, phase, printer)
            if phase.teams[0].nccl_algo:  # each forced algorithm's communicator goes with its phase
                torch.distributed.destroy_process_group(phase.teams[0].group)
        printer.close()
        if folder is not None:
            _scope_summary(rank, opts, scope, sum(len(p.teams) for p in phases))


def _check_root(plan: CommPlan, phases: list[scopes.Phase]) -> None:
    """--root is a rank within each team: every team must have it (the same check on every rank)."""
    opts = plan.options
    if not any(OPS[name].facts.rooted for name in plan.ops):
        return
    for phase in phases:
        for team in phase.teams:
            if opts.root >= len(team.ranks):
                raise UsageError(f"--root {opts.root} is a rank within each {team.scope} team, and {team.name} "
                                 f"has only {len(team.ranks)} ranks")


def _scope_summary(rank: Rank, opts: CommOptions, scope: str, teams: int) -> None:
    """Rank 0, after a scope: its worst node or rail, and what the largest size asked of the network."""
    rows = [r for r in COMM.of(rank.folder.run) if r.scope == scope]
    if teams > 1:
        rank.say(table.worst_team(scope, rows, opts.unit))
    for op in dict.fromkeys(r.op for r in rows):
        largest = max((r for r in rows if r.op == op), key=lambda r: (r.size_bytes, -r.busbw_gbps))
        line = network_line(largest, HARDWARE.of(rank.folder.run))
        if line:
            rank.say(line)


def _run_phase(rank: Rank, plan: CommPlan, sizes: list[int], phase: scopes.Phase, printer: _Printer) -> None:
    """Every team of the phase sweeps at once; rank 0 shows its own team's rows live and the
    others' when the phase ends (every rank waits there, so phases never overlap)."""
    worker, folder = rank.worker, rank.folder
    team = phase.team_of(worker.rank)

    def keep(row: CommRow) -> None:
        if folder is not None:
            printer.add(row)
            folder.append("comm", row, min_interval_s=folder.hot_interval_s)

    mine: list[CommRow] = []
    if team is not None:
        for _, row in team_rows(worker, plan, sizes, team, rank.progress):
            if team.rank_of(worker.rank) == 0:
                mine.append(row)
            keep(row)
    gathered: list[list[CommRow]] = [[] for _ in range(worker.world_size)]
    torch.distributed.all_gather_object(gathered, mine if worker.rank != 0 else [])
    for rows in gathered:
        for row in rows:
            keep(row)
