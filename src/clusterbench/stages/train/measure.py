"""The fine-tuning benchmark on every rank: load, train (K times with --repeats), measure.

Rank 0 prints the progress and records each step as it arrives (at most one run-folder write
a second, so recording never slows the steps it times), then the speed summary, into the
section of run.json its stage hands it. Each rank's step split into phases (stages/train/phases.py)
reaches rank 0 in one gather after the first run, never per step. Judging the curve is left
to the stage's conclusion, after the ranks.
"""

from __future__ import annotations

import resource
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, replace

import torch
import torch.distributed as dist

from clusterbench.results.folder import RunFolder
from clusterbench.runtime.devices import device_name
from clusterbench.runtime.dist import Worker
from clusterbench.runtime.rank import Rank
from clusterbench.stages.train import deferred, display, flops, host_memory, memory, models
from clusterbench.stages.train.data import SFTTask, load_task
from clusterbench.stages.train.job import TrainJob
from clusterbench.stages.train.loop import LoopResult, StepResult, out_of_memory, train
from clusterbench.stages.train.records import RankPhases, StepRow, Train, TrainConfig, TrainSummary

Keep = Callable[[RunFolder, Train], None]  # how rank 0 sets its stage's section of run.json


def measure(rank: Rank, job: TrainJob, keep: Keep, step_rows: bool) -> None:
    """Train the job's task on every rank; rank 0 keeps the record with `keep`, and the per-step
    rows in train_steps when `step_rows`."""
    worker, folder = rank.worker, rank.folder
    if worker.device.type == "cpu":
        torch.use_deterministic_algorithms(True, warn_only=True)
    if job.loop.parallel == "fsdp":  # sharding is asked for to hold less: its cost, stages/train/host_memory.py
        host_memory.return_freed_blocks()
    rank.progress.at("loading data")
    opts = job.options
    task = load_task(opts.data, opts.tokenizer, job.seq_len, opts.packing, opts.seed)
    rank.progress.at("measuring the peak")
    peak = choose_peak(worker, job)
    exact = job.exact_float32 and worker.device.type == "cuda"
    try:
        with float32_matmuls() if exact else nullcontext():
            first, config, curves, built = _repeats(rank, job, task, keep, step_rows)
    finally:
        if folder is not None:
            folder.flush()  # the steps measured so far survive any failure
    peak_bytes, kind = peak_memory(worker)
    phases = gather_phases(worker, first) if first is not None else []
    if folder is None or first is None:
        return
    state = memory.model_state(config.model_params, worker.world_size, job.loop.parallel)
    summary = replace(_summary(first, config, job, worker.world_size, peak), peak_memory_bytes=peak_bytes,
                      peak_memory_kind=kind, model_state_bytes=state.bytes, weights=built)
    keep(folder, Train(config=config, summary=summary, losses=curves[0], repeat_losses=curves[1:], phases=phases))
    rank.say(display.summary(summary, config))
    rank.say(display.phases(phases, config.parallel))


def _repeats(rank: Rank, job: TrainJob, task: SFTTask, keep: Keep,
             step_rows: bool) -> tuple[LoopResult | None, TrainConfig, list[list[float]], str]:
    """The task --repeats times from the same seed, the first recorded step by step; stops at a run
    that does not complete. Returns the first run's result, its config, every run's curve and where
    the weights came from."""
    worker, folder = rank.worker, rank.folder
    config, first, curves, built = job.config, None, [], ""
    for k in range(job.options.repeats):
        rank.progress.at(f"building the model (run {k + 1})")
        model, fill, built = _build(job)
        config = replace(config, model_params=models.count_params(model), model_config=model.config.to_dict())
        recorder = _Recorder(rank, config, keep, step_rows) if k == 0 and folder is not None else None
        try:
            outcome = train(worker, job.loop, model, task, recorder.step if recorder else (lambda r: None),
                            fill=fill)
        except (torch.OutOfMemoryError, RuntimeError) as e:
            raise out_of_memory(e, job.loop, job.seq_len) or e
        del model
        curves.append([r.loss for r in outcome.steps])
        first = first or outcome
        if outcome.status != "complete":
            break
    return first, config, curves, built


def _build(job: TrainJob) -> tuple[torch.nn.Module, models.Fill | None, str]:
    """The model, how it gets its weights once wrapped (None: it has them), and that said in words.
    Under FSDP no rank holds the whole model where it can be helped (models.build_unfilled)."""
    if job.loop.parallel == "fsdp":
        try:
            unfilled = models.build_unfilled(job.model, job.options.seed)
            return unfilled.model, unfilled.fill, unfilled.how
        except deferred.NotReplayable as e:
            return models.build(job.model, job.options.seed), None, f"built whole on every rank: {e}"
    return models.build(job.model, job.options.seed), None, "built whole on every rank (DDP keeps a whole copy)"


def _summary(result: LoopResult, config: TrainConfig, job: TrainJob, world: int, peak: flops.Peak) -> TrainSummary:
    summary = flops.summarize([_row(r, world) for r in result.steps], result.window_s, world,
                              flops.dims_of(config.model_config), job.loop.global_batch, job.seq_len,
                              job.loop.activation_checkpointing and not job.loop.selective_checkpointing, peak)
    stop = None
    if result.status == "nan":
        stop = f"loss became {result.steps[-1].loss} at step {len(result.steps)}"
    return replace(summary, status=result.status, stop_reason=stop)


@contextmanager
def float32_matmuls() -> Iterator[None]:
    """float32 matmuls and convolutions in float32, not TF32, for as long as the canary runs."""
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False  # cudnn.flags() would also switch cuDNN itself off
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.allow_tf32 = before[1]


def _reduce(worker: Worker, values: list[float], op: dist.ReduceOp) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=worker.device)
    dist.all_reduce(t, op=op)
    return t.tolist()


def choose_peak(worker: Worker, job: TrainJob) -> flops.Peak:
    """The peak for MFU: given, else the table for every rank's device, else measured (docs/methodology.md §3)."""
    dtype, given = job.loop.dtype, job.options.peak_tflops
    if given is not None:
        return flops.Peak(given, f"given: --peak-tflops {given:g}")
    table = flops.table_peak(device_name(worker.device), dtype)
    (all_listed,) = _reduce(worker, [1.0 if table else 0.0], dist.ReduceOp.MIN)
    if all_listed and table is not None:
        return table
    m = flops.measured_peak(str(worker.device), dtype)
    (total,) = _reduce(worker, [m.tflops], dist.ReduceOp.SUM)
    mean = total / worker.world_size
    return flops.Peak(mean, flops.measured_source(m.n, dtype, mean, worker.world_size))


def gather_phases(worker: Worker, result: LoopResult) -> list[RankPhases]:
    """Every rank's phase means, on every rank, in one all_gather_object; rank order."""
    everyone: list[tuple[str, dict[str, float]] | None] = [None] * worker.world_size
    dist.all_gather_object(everyone, (str(worker.device), result.phases))
    return [RankPhases(rank=m.rank, node=m.node, device=device, **{f"{p}_s": s for p, s in means.items()})
            for m, (device, means) in zip(worker.members, everyone)]


def peak_memory(worker: Worker) -> tuple[int, str]:
    """Largest peak over the ranks: allocator peak on a GPU, process max RSS on a CPU."""
    if worker.device.type == "cuda":
        mine, kind = torch.cuda.max_memory_allocated(worker.device), "torch.cuda.max_memory_allocated"
    else:
        mine, kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "process max RSS (CPU)"
    (most,) = _reduce(worker, [float(mine)], dist.ReduceOp.MAX)
    return int(most), kind


def _row(r: StepResult, world: int) -> StepRow:
    return StepRow(**asdict(r), tgs=r.real_tokens / (world * r.seconds) if r.seconds > 0 else None)


class _Recorder:
    """Rank 0's per-step duties: the progress line and the run folder rows, as they arrive."""

    def __init__(self, rank: Rank, config: TrainConfig, keep: Keep, step_rows: bool) -> None:
        self.folder: RunFolder = rank.folder
        self.world = rank.worker.world_size
        self.display = display.ProgressLine(config.steps, self.world)
        self.train = Train(config=config)
        self.step_rows = step_rows
        keep(self.folder, self.train)
        rank.say(display.header(config, rank.env))

    def step(self, r: StepResult) -> None:
        self.display.update(r)
        self.train.losses.append(r.loss)
        if self.step_rows:
            # At most one run-folder write a second, so recording never slows the steps it times.
            self.folder.append("train_steps", _row(r, self.world), min_interval_s=1.0)
