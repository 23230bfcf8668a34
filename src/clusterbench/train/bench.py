"""The fine-tuning benchmark on every rank: load, train (K times with --repeats), measure.

Rank 0 prints the progress and records each step as it arrives (at most one run-folder write
a second, so recording never slows the steps it times), then the speed summary. Judging the
curve is left to the job's conclusion, after the ranks.
"""

from __future__ import annotations

import resource
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, replace

import torch
import torch.distributed as dist

from clusterbench.dist import Worker, device_name
from clusterbench.rank import Rank
from clusterbench.results.folder import RunFolder
from clusterbench.results.schema import StepRow, Train, TrainConfig
from clusterbench.train import display, flops, models
from clusterbench.train.data import load_task
from clusterbench.train.job import TrainJob
from clusterbench.train.loop import LoopResult, StepResult, out_of_memory, train


def run_train(rank: Rank, job: TrainJob) -> None:
    worker, folder = rank.worker, rank.folder
    if worker.device.type == "cpu":
        torch.use_deterministic_algorithms(True, warn_only=True)
    rank.progress.at("loading data")
    opts = job.options
    task = load_task(opts.data, opts.tokenizer, job.seq_len, opts.packing, opts.seed)
    rank.progress.at("measuring the peak")
    peak = choose_peak(worker, job)
    curves: list[list[float]] = []
    result: LoopResult | None = None
    config = job.config
    exact = job.exact_float32 and worker.device.type == "cuda"
    try:
        with float32_matmuls() if exact else nullcontext():
            for k in range(opts.repeats):
                rank.progress.at(f"building the model (run {k + 1})")
                model = models.build(job.model, opts.seed)
                config = replace(config, model_params=models.count_params(model),
                                 model_config=model.config.to_dict())
                recorder = _Recorder(rank, config, job.section) if k == 0 and folder is not None else None
                try:
                    outcome = train(worker, job.loop, model, task, recorder.step if recorder else (lambda r: None))
                except (torch.OutOfMemoryError, RuntimeError) as e:
                    raise out_of_memory(e, job.loop, job.seq_len) or e
                del model
                curves.append([r.loss for r in outcome.steps])
                result = result or outcome
                if outcome.status != "complete":
                    break
    finally:
        if folder is not None:
            folder.flush()  # the steps measured so far survive any failure
    memory, kind = peak_memory(worker)
    if folder is None or result is None:
        return
    summary = flops.summarize([_row(r, worker.world_size) for r in result.steps], result.window_s,
                              worker.world_size, flops.dims_of(config.model_config), job.loop.global_batch,
                              job.seq_len, job.loop.activation_checkpointing, peak)
    stop = None
    if result.status == "nan":
        stop = f"loss became {curves[0][-1]} at step {len(curves[0])}"
    summary = replace(summary, peak_memory_bytes=memory, peak_memory_kind=kind, status=result.status,
                      stop_reason=stop)
    folder.record(**{job.section: replace(getattr(folder.run, job.section), summary=summary,
                                          repeat_losses=curves[1:])})
    rank.say(display.summary(summary))


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

    def __init__(self, rank: Rank, config: TrainConfig, section: str) -> None:
        self.folder: RunFolder = rank.folder
        self.world = rank.worker.world_size
        self.display = display.ProgressLine(config.steps, self.world)
        self.train = Train(config=config)
        self.steps_table = section == "train"  # the canary keeps its losses, not a second step table
        self.folder.record(**{section: self.train})
        rank.say(display.header(config, rank.env))

    def step(self, r: StepResult) -> None:
        self.display.update(r)
        self.train.losses.append(r.loss)
        if self.steps_table:
            # At most one run-folder write a second, so recording never slows the steps it times.
            self.folder.append("train_steps", _row(r, self.world), min_interval_s=1.0)
