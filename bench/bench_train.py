"""Does clusterbench's training loop slow training? Its tgs against a bare loop, in one run.

Both loops train the same model (same seed), on the same batches, with the same DDP
wrapper, AdamW, clipping and lr schedule on the same 2 gloo ranks. The bare loop has no
metrics: no token counting collective, no loss all-reduce, no per-step sync, no run folder.
clusterbench's loop runs with the per-step duties of `clusterbench train` (run-folder rows,
a progress line). A third loop is clusterbench's without the phase clock's marks (each rank's
step split, stages/train/phases.py), to weigh what they cost alone. Rounds alternate bare /
clusterbench / clusterbench without phases; the best round of each is compared (the best,
because other load on a small machine only ever slows a round down).

    python bench/bench_train.py            # tiny and 125m presets on 2 CPU ranks
Target: ratio >= 0.97 (issue 3); the phase clock: ratio >= 0.99 (issue 21).
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from clusterbench.results.folder import RunFolder
from clusterbench.runtime import launch
from clusterbench.runtime.devices import synchronize
from clusterbench.runtime.dist import Worker, resolve
from clusterbench.stages.registry import run_folder
from clusterbench.stages.train import flops, models
from clusterbench.stages.train.data import IGNORE, load_task
from clusterbench.stages.train.loop import ADAM_BETAS, GRAD_CLIP, LoopConfig, grad_sync, train, wrap
from clusterbench.stages.train.records import StepRow

CASES = {
    "tiny": {"seq_len": 64, "loop": LoopConfig(steps=40, warmup_steps=5, global_batch=16, micro_batch=4, lr=1e-3,
                                             lr_warmup_steps=10, dtype="float32", parallel="ddp",
                                             activation_checkpointing=False), "rounds": 5},
    "125m": {"seq_len": 64, "loop": LoopConfig(steps=7, warmup_steps=2, global_batch=4, micro_batch=1, lr=3e-4,
                                             lr_warmup_steps=10, dtype="float32", parallel="ddp",
                                             activation_checkpointing=False), "rounds": 1},
}


def bare_tgs(worker: Worker, preset: str, cfg: LoopConfig, task) -> float:
    model = wrap(models.build(models.resolve(preset, None, None), 0), worker, cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=ADAM_BETAS, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / cfg.lr_warmup_steps))
    accum = cfg.global_batch // (worker.world_size * cfg.micro_batch)
    tokens = sum(task.batch(s, cfg.global_batch).real_tokens for s in range(cfg.warmup_steps, cfg.steps))
    for step in range(cfg.steps):
        if step == cfg.warmup_steps:
            synchronize(worker.device)
            start = time.perf_counter()
        b = task.batch(step, cfg.global_batch, worker.rank, worker.world_size)
        for i in range(accum):
            rows = slice(i * cfg.micro_batch, (i + 1) * cfg.micro_batch)
            with grad_sync(model, i == accum - 1):
                logits = model(input_ids=b.input_ids[rows], use_cache=False).logits
                loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), b.labels[rows, 1:].flatten(),
                                       ignore_index=IGNORE) / accum
                loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    synchronize(worker.device)
    return tokens / (worker.world_size * (time.perf_counter() - start))


def ours_tgs(worker: Worker, preset: str, cfg: LoopConfig, task, folder: RunFolder | None,
             time_phases: bool = True) -> tuple[float, float]:
    def on_step(r) -> None:
        if folder is not None:
            # As the product records: every step, written at most once a second.
            folder.append("train_steps", StepRow(**dataclasses.asdict(r), tgs=None), min_interval_s=1.0)
            print(f"\rstep {r.step} loss {r.loss:.4f}", end="", file=sys.stderr, flush=True)

    model = models.build(models.resolve(preset, None, None), 0)
    result = train(worker, cfg, model, task, on_step, time_phases)
    window = [r for r in result.steps if r.in_window]
    dims = flops.dims_of(model.config.to_dict())
    fl = sum(flops.step_flops(dims, r.real_tokens, cfg.global_batch * task.seq_len**2) for r in window)
    devs = worker.world_size * result.window_s
    return sum(r.real_tokens for r in window) / devs, fl / devs / 1e12


def bench_job(worker: Worker, out: Path, progress) -> None:
    for preset, case in CASES.items():
        cfg, rounds = case["loop"], case["rounds"]
        task = load_task(seq_len=case["seq_len"], packing=True, seed=0)
        folder = run_folder(out / preset).begin("bench", []) if worker.is_main else None
        bare, ours, unclocked, tflops = [], [], [], []
        for _ in range(rounds):
            bare.append(bare_tgs(worker, preset, cfg, task))
            tgs, tf = ours_tgs(worker, preset, cfg, task, folder)
            ours.append(tgs)
            tflops.append(tf)
            unclocked.append(ours_tgs(worker, preset, cfg, task, folder, time_phases=False)[0])
        if worker.is_main:
            print(f"\r{preset:>5}: bare loop tgs {max(bare):,.1f}  clusterbench tgs {max(ours):,.1f}  "
                  f"ratio {max(ours) / max(bare):.3f}  (TFLOPS/device {max(tflops):.4f}; "
                  f"rounds bare {[round(x) for x in bare]} ours {[round(x) for x in ours]})\n"
                  f"{'':>7}phase clock: tgs {max(ours):,.1f} with, {max(unclocked):,.1f} without, "
                  f"ratio {max(ours) / max(unclocked):.3f} (rounds without {[round(x) for x in unclocked]})",
                  flush=True)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        cfg = resolve("gloo", "cpu")
        sys.exit(launch.run(launch.Job(bench_job, Path(tmp), cfg), 2).code)
