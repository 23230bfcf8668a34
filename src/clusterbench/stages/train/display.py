"""What `clusterbench train` prints on rank 0: the header, the progress, the speed summary, the ranks' phases."""

from __future__ import annotations

import sys

from clusterbench.results.run import Env
from clusterbench.stages.train import memory, stragglers
from clusterbench.stages.train.loop import StepResult
from clusterbench.stages.train.records import RankPhases, TrainConfig, TrainSummary
from clusterbench.units import human_bytes


def _num(x: float | None, fmt: str = ".4g") -> str:
    return "-" if x is None else format(x, fmt)


class ProgressLine:
    """A \\r bar on a terminal, else a line every tenth of the run: live loss and tgs."""

    def __init__(self, steps: int, world_size: int) -> None:
        self.steps = steps
        self.world = world_size
        self.tty = sys.stdout.isatty()
        self.every = max(1, steps // 10)

    def update(self, r: StepResult) -> None:
        tgs = r.real_tokens / (self.world * r.seconds) if r.seconds > 0 else 0.0
        text = f"step {r.step:>{len(str(self.steps))}}/{self.steps}  loss {r.loss:.4f}  tgs {tgs:,.0f}"
        if not r.in_window:
            text += "  (warm-up)"
        if self.tty:
            done = int(30 * r.step / self.steps)
            print(f"\r[{'#' * done}{'.' * (30 - done)}] {text}\033[K", end="", flush=True)
            if r.step == self.steps or r.loss != r.loss or abs(r.loss) == float("inf"):
                print()
        elif r.step % self.every == 0 or r.step == 1 or r.step == self.steps:
            print(text, flush=True)


def _batch_split(c: TrainConfig) -> str:
    """How the global batch is cut over ranks and micro-batches; an uneven cut says so, since then the
    product of micro-batch, accumulation and ranks is not the global batch."""
    g, w, m, a = c.global_batch, c.world_size, c.micro_batch, c.grad_accum
    if g == m * a * w:
        return f"global batch {g} = micro-batch {m} x {a} accumulation x {w} ranks"
    more = g % w
    shares = f" ({g // w + 1} rows on {more}, {g // w} on {w - more})" if more else ""
    return f"global batch {g} over {w} ranks{shares}, each in {a} micro-batch{'es' if a > 1 else ''} of at most {m} rows"


def header(c: TrainConfig, env: Env) -> str:
    params = f"{c.model_params / 1e6:.1f}M" if c.model_params is not None else "?"
    return (f"# clusterbench train: {c.preset} ({params} params), "
            f"{c.world_size} x {env.device_type} ({env.backend}), {c.parallel}, {c.dtype}\n"
            f"# task {c.task}: {_batch_split(c)}, seq-len {c.seq_len}"
            f"{' packed' if c.packing else ' padded'}, {c.steps} steps ({c.warmup_steps} untimed), "
            f"lr {c.lr:g}, seed {c.seed}"
            f"{_levers(c)}")


def _levers(c: TrainConfig) -> str:
    said = [("selective " if c.selective_checkpointing else "") + "activation checkpointing"
            if c.activation_checkpointing else "", "compiled layers" if c.compiled else "",
            "fused AdamW" if c.fused_adamw else "",
            "layers kept gathered from forward to backward" if not c.reshard_after_forward else ""]
    return "".join(f", {s}" for s in said if s)


def summary(s: TrainSummary, c: TrainConfig) -> str:
    lines = [
        f"# steps {s.steps_done}, status {s.status}",
        f"  tokens (real, timed window)  {s.tokens:,} in {s.window_s:.3f} s",
        f"  tgs (tokens/device/s)        {_num(s.tgs, ',.1f')}",
    ]
    if s.padded_tgs is not None:
        lines.append(f"  padded tokens/device/s       {_num(s.padded_tgs, ',.1f')}")
    lines += [
        f"  FLOPs per step               {_num(s.flops_per_step, '.4g')}",
        f"  TFLOPS per device            {_num(s.tflops_per_device, '.4g')}",
        (f"  MFU                          {100 * s.mfu:.2f} %  (peak {s.peak_tflops:.4g} TFLOP/s, {s.peak_source})"
         if s.mfu is not None else "  MFU                          - (no FLOPs formula for this model)"),
    ]
    if s.hfu is not None:
        lines.append(f"  HFU (with recomputation)     {100 * s.hfu:.2f} %")
    peak = "-" if s.peak_memory_bytes is None else human_bytes(s.peak_memory_bytes, 4)
    lines.append(f"  peak memory per device       {peak} ({s.peak_memory_kind})")
    if s.model_state_bytes is not None and c.model_params is not None:
        state_text = memory.model_state(c.model_params, c.world_size, c.parallel).text(c.model_params)
        lines.append(f"  model state per rank         {human_bytes(s.model_state_bytes, 4)} (parameters, gradients, "
                     f"AdamW: {state_text})")
    if s.weights:
        lines.append(f"  weights                      {s.weights}")
    return "\n".join(lines)


# Ranks listed by name; a larger job lists its slowest by compute (every rank is in run.json's train.phases).
PHASE_ROWS = 16


def phases(ranks: list[RankPhases], parallel: str) -> str:
    """Each rank's step split (seconds per timed step), then the slowest rank against the others."""
    shown = ranks if len(ranks) <= PHASE_ROWS else sorted(ranks, key=lambda p: p.compute_s, reverse=True)[:PHASE_ROWS]
    which = "by rank" if shown is ranks else f"the {PHASE_ROWS} slowest of {len(ranks)} ranks by compute"
    lines = [f"# step {which}, s per step  data / forward / backward / sync / optimizer = step"]
    for p in shown:
        split = " / ".join(f"{x:.4f}" for x in (p.data_s, p.forward_s, p.backward_s, p.sync_s, p.optimizer_s))
        lines.append(f"  rank {p.rank:<3} {p.node} {p.device:<8} {split} = {p.step_s:.4f}")
    why = stragglers.judge_reason(ranks, parallel)
    lines.append(f"  slowest rank: {stragglers.finding(stragglers.find(ranks)) if why is None else f'not judged, {why}'}")
    return "\n".join(lines)
