"""The fine-tuning job: built once from typed options before any rank starts, judged once after.

Building resolves every default for the hardware (preset, sequence length, batch, dtype,
learning rate), refuses what cannot run (a global batch with fewer rows than ranks, a sequence
longer than the model takes, data a tokenizer cannot read), and chooses the reference curve.
Judging, on the process that owns the run folder, compares the finished curve with that
reference and writes --save-reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from clusterbench.errors import UsageError
from clusterbench.results.run import Run
from clusterbench.runtime.forking import without_thread_pools
from clusterbench.stages.train import alignment, models, references
from clusterbench.stages.train.data import load_task
from clusterbench.stages.train.loop import LoopConfig, split
from clusterbench.stages.train.options import TrainOptions
from clusterbench.stages.train.records import TRAIN, LossReference, Train, TrainConfig

# The task of a CPU run: small enough to train 100 steps on two cores in seconds.
CPU_DEFAULTS = {"preset": "tiny", "seq_len": 64, "global_batch": 16, "micro_batch": 4, "dtype": "float32"}
GPU_DEFAULTS = {"preset": "llama-1b", "seq_len": 2048, "global_batch": 32, "micro_batch": 4, "dtype": "bfloat16"}
GPU_SMALL_PRESET, GPU_SMALL_BYTES = "125m", 40 * 1024**3  # below this, llama-1b + Adam does not fit
# The numerics canary: the CPU task in float32 on any device, judged against the shipped CPU curve.
CANARY_REFERENCE = "tiny-cpu-float32"
CANARY_OPTIONS = TrainOptions(preset="tiny", seq_len=64, global_batch=16, dtype="float32", reference=CANARY_REFERENCE)


@dataclass(frozen=True)
class TrainJob:
    model: models.ModelSpec
    loop: LoopConfig
    options: TrainOptions
    seq_len: int
    config: TrainConfig  # train.config of run.json; model_params filled in once the model exists
    reference: LossReference | None  # the curve to judge by; None: not judged
    reference_label: str | None
    reference_note: str | None  # why no shipped reference judges this run
    exact_float32: bool = False  # TF32 off: float32 matmuls as float32, so the canary checks float32 numerics


def _defaults(device_type: str) -> dict:
    if device_type != "cuda":
        return CPU_DEFAULTS
    if torch.cuda.get_device_properties(0).total_memory < GPU_SMALL_BYTES:
        return {**GPU_DEFAULTS, "preset": GPU_SMALL_PRESET}
    return GPU_DEFAULTS


def build(opts: TrainOptions, device_type: str, world_size: int) -> TrainJob:
    """Resolve the defaults and refuse bad settings before any rank starts."""
    defaults = _defaults(device_type)
    preset = opts.preset or (None if opts.model_config or opts.model_path else defaults["preset"])
    spec = models.resolve(preset, opts.model_config, opts.model_path)
    seq_len = opts.seq_len or defaults["seq_len"]
    global_batch = opts.global_batch or defaults["global_batch"]
    if opts.warmup_steps >= opts.steps:
        raise UsageError(f"--warmup-steps {opts.warmup_steps} leaves no timed step of --steps {opts.steps}")
    if spec.max_positions and seq_len > spec.max_positions:
        raise UsageError(f"--seq-len {seq_len} is longer than model {spec.name} can take "
                         f"(max_position_embeddings {spec.max_positions})")
    micro, accum = split(global_batch, world_size, opts.micro_batch or defaults["micro_batch"])
    lr = opts.lr if opts.lr is not None else (1e-3 if spec.name == "tiny" else 3e-4)
    if not (math.isfinite(lr) and lr > 0):
        raise UsageError(f"--lr must be positive, got {lr:g}")
    loop = LoopConfig(steps=opts.steps, warmup_steps=opts.warmup_steps, global_batch=global_batch,
                      micro_batch=micro, lr=lr, lr_warmup_steps=opts.lr_warmup_steps,
                      dtype=opts.dtype or defaults["dtype"], parallel=opts.parallel,
                      activation_checkpointing=opts.activation_checkpointing is not None,
                      selective_checkpointing=opts.activation_checkpointing == "selective", compile=opts.compile,
                      fused_adamw=device_type == "cuda" if opts.fused_adamw is None else opts.fused_adamw,
                      reshard_after_forward=opts.reshard_after_forward)
    if not loop.reshard_after_forward and loop.parallel != "fsdp":
        raise UsageError("--no-reshard-after-forward is for --parallel fsdp: DDP never shards the parameters")
    # Loaded here too (the ranks load their own) so bad data fails before any rank starts.
    with without_thread_pools():
        task = load_task(opts.data, opts.tokenizer, seq_len, opts.packing, opts.seed)
    vocab = spec.config.get("vocab_size", task.vocab_size)
    if task.vocab_size > vocab:
        raise UsageError(f"the tokenizer has {task.vocab_size} tokens, model {spec.name} only {vocab}")
    config = TrainConfig(
        preset=spec.name, model_params=None, model_config=spec.config, model_hash=spec.config_hash,
        parallel=loop.parallel, dtype=loop.dtype, world_size=world_size, global_batch=global_batch,
        micro_batch=micro, grad_accum=accum, seq_len=seq_len,
        packing=opts.packing, steps=loop.steps, warmup_steps=loop.warmup_steps, lr=lr,
        lr_warmup_steps=loop.lr_warmup_steps, seed=opts.seed, task=task.name,
        activation_checkpointing=loop.activation_checkpointing, repeats=opts.repeats,
        selective_checkpointing=loop.selective_checkpointing, compiled=loop.compile, fused_adamw=loop.fused_adamw,
        reshard_after_forward=loop.reshard_after_forward)
    shipped = references.shipped_name(spec.name, device_type, loop.dtype)
    ref, label, note = references.choose(opts.reference, shipped, config)
    return TrainJob(spec, loop, opts, seq_len, config, ref, label, note)


def canary(world_size: int) -> TrainJob:
    """The canary's job: the CPU task, whatever the device (so it is built with the CPU's defaults); a
    UsageError says why it cannot run (more ranks than its global batch of 16 has rows)."""
    return replace(build(CANARY_OPTIONS, "cpu", world_size), exact_float32=True)


def judge(train: Train | None, job: TrainJob) -> None:
    """On the process that owns the run folder: the alignment verdict of a train record (the train
    stage's or the canary's), printed and kept. The run's own failures are the analysis layer's to name."""
    if train is None:
        return
    train.reference_note = job.reference_note
    if job.reference_note:
        print(f"# loss alignment not judged: {job.reference_note}", flush=True)
    if job.reference is not None and train.losses:
        ref = job.reference
        limits = alignment.limits_for(ref.losses, ref.noise_band, job.options.variance_limit, job.options.mre_limit)
        train.alignment = alignment.compare(train.losses, ref.losses, limits, train.config.steps, job.reference_label)
        print(alignment.table(train.alignment), flush=True)


def save_reference(run: Run, job: TrainJob) -> None:
    """--save-reference: the finished curve (and its repeats) as a reference file, when the run completed."""
    path, train = job.options.save_reference, TRAIN.of(run)
    if path and train is not None and train.summary is not None and train.summary.status == "complete" \
            and run.status == "complete":
        curves = [train.losses, *train.repeat_losses]
        references.save(references.make(replace(train.config), curves, run.env, run.argv), path)
        print(f"# reference written: {path}", flush=True)
