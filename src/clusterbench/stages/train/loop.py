"""The training loop: wrap the model, then step, accumulate, step again, timing a window.

The loss of every micro-batch is summed over its loss tokens and divided by the loss
tokens of the whole GLOBAL batch of the step (known to every rank from the seeded data order,
so no collective is spent on it). With the
world-size factor that DDP's / FSDP's gradient averaging removes again, the gradient is
the token-weighted mean over the global batch whatever the world size and micro-batch
split: this is what makes 1, 2, 3 and 8 ranks train the same curve, also where ranks and
micro-batches hold unequal numbers of rows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from clusterbench import faults
from clusterbench.errors import UsageError, is_out_of_memory
from clusterbench.runtime.devices import synchronize
from clusterbench.runtime.dist import Worker
from clusterbench.stages.train import checkpointing
from clusterbench.stages.train.data import IGNORE, SFTTask, share
from clusterbench.stages.train.models import Fill
from clusterbench.stages.train.phases import PhaseClock

GRAD_CLIP = 1.0
ADAM_BETAS = (0.9, 0.95)


@dataclass(frozen=True)
class LoopConfig:
    """Everything that defines how the task is optimised and timed."""

    steps: int
    warmup_steps: int  # untimed steps before the window
    global_batch: int
    micro_batch: int  # rows of the largest micro-batch; see accumulation()
    lr: float
    lr_warmup_steps: int  # linear ramp to lr, then constant
    dtype: str
    parallel: str  # "ddp" or "fsdp"
    activation_checkpointing: bool
    # Levers that leave the task as it is (docs/methodology.md §4 "Levers"):
    selective_checkpointing: bool = False  # with activation_checkpointing: keep matmul and attention outputs
    compile: bool = False  # torch.compile each decoder layer
    fused_adamw: bool = False
    reshard_after_forward: bool = True  # FSDP: gather each layer again for backward


@dataclass(frozen=True)
class StepResult:
    step: int
    loss: float  # token-weighted mean over the global batch
    tokens: int  # padded tokens of the global batch
    real_tokens: int
    loss_tokens: int
    seconds: float
    in_window: bool


@dataclass(frozen=True)
class LoopResult:
    steps: list[StepResult]
    window_s: float
    status: str  # "complete" or "nan"
    phases: dict[str, float]  # this rank's seconds per window step of each phase (stages/train/phases.py)


def accumulation(global_batch: int, world_size: int, micro_batch: int) -> int:
    """Micro-batches per step, the same on every rank: FSDP gathers parameters in each forward and DDP
    reduces on the last backward, so a rank that ran fewer would hang the others. As many as the largest
    rank share needs in micro-batches of at most `micro_batch` rows."""
    largest_share = -(-global_batch // world_size)
    return -(-largest_share // micro_batch)


def split(global_batch: int, world_size: int, most: int) -> tuple[int, int]:
    """(rows of the largest micro-batch, micro-batches per step): each rank's share of the global batch
    (G // W rows or one more) cut into that many micro-batches of at most `most` rows, as even as can be.
    accumulation() of the largest gives the count back, so LoopConfig carries the largest alone. A
    UsageError when some rank would be left without a row for a forward."""
    if global_batch < world_size:
        raise UsageError(f"--global-batch {global_batch} is smaller than the {world_size} ranks: "
                         f"every rank needs at least one row per step")
    accum = accumulation(global_batch, world_size, most)
    fewest = global_batch // world_size
    # Only micro-batches of 1 row over an uneven split ask more forwards of the smaller shares than they have rows.
    if fewest < accum:
        raise UsageError(f"--micro-batch {most} takes {accum} micro-batches per step on every rank, but "
                         f"--global-batch {global_batch} over {world_size} ranks leaves some rank {fewest} rows: "
                         f"raise --micro-batch or make --global-batch a multiple of {world_size}")
    largest_share = -(-global_batch // world_size)
    return -(-largest_share // accum), accum


def wrap(model: torch.nn.Module, worker: Worker, cfg: LoopConfig, fill: Fill | None = None) -> torch.nn.Module:
    """Move to the device and apply the data-parallel wrapper. Under FSDP, `fill` gives a model built
    on meta its weights once sharded (stages/train/models.py: build_unfilled)."""
    if cfg.activation_checkpointing:
        options: dict = {"use_reentrant": False}
        if cfg.selective_checkpointing:
            options["context_fn"] = checkpointing.selective
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=options)
    model.train()
    if cfg.compile:
        for layer in getattr(model.get_decoder(), "layers", []):
            layer.compile()
    if cfg.parallel == "fsdp":
        if fill is None:
            model.to(worker.device)
        model = shard(model, cfg)
        if fill is not None:
            fill(model, worker.device)
        return model
    from torch.nn.parallel import DistributedDataParallel

    model.to(worker.device)
    ids = [worker.device] if worker.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def shard(model: torch.nn.Module, cfg: LoopConfig) -> torch.nn.Module:
    """FSDP2 over each decoder layer, the input embedding, and the final norm with the output layer,
    so that no group but the one running is held whole (the root alone would keep the embedding and
    the output layer gathered from forward to backward). Tied input and output weights stay in the
    root's group: one parameter cannot be sharded by two."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=getattr(torch, cfg.dtype), reduce_dtype=torch.float32)
    decoder = model.get_decoder()
    for layer in getattr(decoder, "layers", []):
        fully_shard(layer, mp_policy=mp, reshard_after_forward=cfg.reshard_after_forward)
    embed, out, norm = model.get_input_embeddings(), model.get_output_embeddings(), getattr(decoder, "norm", None)
    if out is not None and out.weight is not embed.weight:
        fully_shard(embed, mp_policy=mp)
        fully_shard([m for m in (norm, out) if m is not None], mp_policy=mp)
    return fully_shard(model, mp_policy=mp)


@contextmanager
def grad_sync(model: torch.nn.Module, enabled: bool) -> Iterator[None]:
    """Reduce gradients only on the last micro-batch of a step."""
    if hasattr(model, "no_sync"):
        with nullcontext() if enabled else model.no_sync():
            yield
    else:  # FSDP2
        model.set_requires_gradient_sync(enabled)
        yield


def sum_loss(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor,
             mask: torch.Tensor | None) -> torch.Tensor:
    """Cross entropy summed (not averaged) over the loss tokens of these rows."""
    logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(),
                           ignore_index=IGNORE, reduction="sum")


def train(worker: Worker, cfg: LoopConfig, model: torch.nn.Module, task: SFTTask,
          on_step: Callable[[StepResult], None], time_phases: bool = True, fill: Fill | None = None) -> LoopResult:
    """Run cfg.steps optimizer steps; stop early, status "nan", on a non-finite loss. `time_phases`
    False leaves the phase clock's marks out (bench/bench_train.py weighs what they cost); `fill`
    is wrap()'s."""
    dev, world = worker.device, worker.world_size
    accum = accumulation(cfg.global_batch, world, cfg.micro_batch)
    clock = PhaseClock(dev, time_phases)
    clock.watch_embedding(model.get_input_embeddings())
    model = wrap(model, worker, cfg, fill)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=ADAM_BETAS, weight_decay=0.0,
                            fused=cfg.fused_adamw or None)
    ramp = max(1, cfg.lr_warmup_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / ramp))
    # FSDP's policy casts parameters itself; DDP computes in bf16 under autocast.
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16,
                              enabled=cfg.dtype == "bfloat16" and cfg.parallel == "ddp")
    results: list[StepResult] = []
    window_start = time.perf_counter()
    status = "complete"
    for step in range(1, cfg.steps + 1):
        start = time.perf_counter()
        clock.begin()
        batch = task.batch(step - 1, cfg.global_batch, worker.rank, world)
        ids, labels = batch.input_ids.to(dev), batch.labels.to(dev)
        # Packed rows need no mask, and without one SDPA takes its fast causal path.
        mask = None if batch.real_tokens == ids.numel() else batch.attention_mask.to(dev)
        real_tokens, loss_tokens = task.global_counts(step - 1, cfg.global_batch)
        scale = world / loss_tokens  # gradient averaging divides by world again
        clock.mark("data")

        loss_sum = torch.zeros((), dtype=torch.float64, device=dev)
        for i in range(accum):
            rows = share(len(ids), accum, i)
            with grad_sync(model, i == accum - 1):
                with autocast:
                    loss = sum_loss(model, ids[rows], labels[rows], None if mask is None else mask[rows])
                if faults.poisoned(step, worker.rank):
                    loss = loss * float("nan")
                clock.mark("forward")
                (loss * scale).backward()  # the embedding's hook marks "backward" inside
                clock.mark("sync")
            loss_sum += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        clock.mark("optimizer")
        dist.all_reduce(loss_sum)
        clock.mark("sync")
        mean_loss = loss_sum.item() / loss_tokens
        synchronize(dev)
        now = time.perf_counter()
        clock.end(step > cfg.warmup_steps)

        result = StepResult(step, mean_loss, cfg.global_batch * task.seq_len, real_tokens, loss_tokens,
                            now - start, step > cfg.warmup_steps)
        results.append(result)
        on_step(result)
        if step == cfg.warmup_steps:
            window_start = time.perf_counter()
        if not math.isfinite(mean_loss):
            status = "nan"
            break
    synchronize(dev)
    window_s = time.perf_counter() - window_start if any(r.in_window for r in results) else 0.0
    return LoopResult(results, window_s, status, clock.means())


def out_of_memory(exc: BaseException, cfg: LoopConfig, seq_len: int) -> UsageError | None:
    """A UsageError naming the settings to lower when `exc` is an out-of-memory error."""
    if not is_out_of_memory(exc):
        return None
    hint = "" if cfg.activation_checkpointing else ", or add --activation-checkpointing"
    if cfg.parallel == "ddp":
        hint += ", or shard the model with --parallel fsdp (DDP keeps the whole model, its gradients and AdamW's state on every rank)"
    return UsageError(f"out of memory with --micro-batch {cfg.micro_batch} and --seq-len {seq_len}: "
                      f"lower --micro-batch or --seq-len{hint}")
