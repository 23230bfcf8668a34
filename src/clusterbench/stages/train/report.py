"""The train section: speed cards, the loss curve against its reference, the alignment verdict, and each
rank's step split into phases with the slowest rank named (stages/train/stragglers.py)."""

from __future__ import annotations

from typing import Any

from clusterbench.report.blocks import badge, card, cards, details, esc, facts, note, num, pct, section, table
from clusterbench.report.plots import loss_plot, phases_plot
from clusterbench.stages.train import stragglers
from clusterbench.stages.train.records import Alignment, RankPhases, Train, TrainSummary

_CONFIG_KEYS = ("preset", "model_params", "parallel", "dtype", "world_size", "global_batch", "micro_batch",
                "grad_accum", "seq_len", "packing", "steps", "warmup_steps", "lr", "seed", "task",
                "activation_checkpointing")


def plot_count(train: Train) -> int:
    return (1 if train.losses else 0) + (1 if train.phases else 0)


def train_section(train: Train, anchor: str = "train", title: str = "Fine-tuning", lead: str = "") -> str:
    s = train.summary
    body = cards(_speed_cards(s)) if s is not None else ""
    body += facts((key, esc(_config_value(key, getattr(train.config, key)))) for key in _CONFIG_KEYS)
    align = train.alignment
    plot = ""
    if train.losses:
        losses = [float("nan") if x is None else x for x in train.losses]
        plot = loss_plot(f"{anchor}-loss", losses, align.reference_losses if align else None)
    why = train.reference_note or "no reference curve for this task and preset"
    judged = _alignment(align) if align else note(f"Loss alignment was not judged: {esc(why)}.")
    body += f'<h3>Loss per optimizer step</h3><div class="op"><div>{plot}</div><div>{judged}</div></div>'
    if train.phases:
        body += _phases(train.phases, train.config.parallel, anchor)
    if s is None or s.status != "complete":
        status = "stopped before its summary" if s is None else s.stop_reason or s.status
        body += note(f"Training status: <b>{esc(status)}</b>.", "fail")
    lead = lead or ("tgs = real tokens / devices / second over the timed window (after warm-up); "
                    "MFU = model FLOPs per device per second / peak (activation recomputation is in HFU, not MFU).")
    return section(anchor, title, body, lead=lead)


def _phases(ranks: list[RankPhases], parallel: str, anchor: str) -> str:
    """Each rank's step as stacked phases, the slowest rank in words, the figures in a table."""
    labels = [f"rank {p.rank} ({p.node}, {p.device})" for p in ranks]
    columns = {"data": [p.data_s for p in ranks], "forward": [p.forward_s for p in ranks],
               "backward": [p.backward_s for p in ranks], "sync": [p.sync_s for p in ranks],
               "optimizer": [p.optimizer_s for p in ranks]}
    plot = phases_plot(f"{anchor}-phases", labels, columns)
    why = stragglers.judge_reason(ranks, parallel)
    said = (f"Slowest rank: {esc(stragglers.finding(stragglers.find(ranks)))}." if why is None
            else f"The slowest rank is not judged: {esc(why)}.")
    rows = [[esc(label), *(num(p_s, 4) for p_s in (p.data_s, p.forward_s, p.backward_s, p.sync_s, p.optimizer_s,
                                                  p.step_s))] for label, p in zip(labels, ranks)]
    figures = table(["rank", *columns, "step"], rows)
    return (f"<h3>Step time by rank</h3>{plot}{note(said)}"
            f"{details('Seconds per timed step, by rank and phase', figures)}")


def _speed_cards(s: TrainSummary) -> list[str]:
    window = f"{esc(s.steps_done)} steps, {num(s.window_s)} s window"
    padded = f"{num(s.padded_tgs)} with padding" if s.padded_tgs is not None else window
    peak = f"of {num(s.peak_tflops)} TFLOP/s, {esc(s.peak_source)}"
    mfu_note = peak if s.mfu is not None else "no FLOPs formula for this model"
    items = [
        card("tgs", num(s.tgs, 4), f"tokens / GPU / s; {padded}"),
        card("TFLOPS / device", num(s.tflops_per_device), _flop(s.flops_per_step)),
        card("MFU", pct(s.mfu), mfu_note),
    ]
    if s.hfu is not None:
        items.append(card("HFU", pct(s.hfu), "with recomputation"))
    if s.peak_memory_bytes is not None:
        items.append(card("peak memory", f"{s.peak_memory_bytes / 2**30:.2f} GiB", esc(s.peak_memory_kind or "")))
    items.append(card("tokens", f"{s.tokens:,}", window))
    return items


def _flop(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g} FLOP per step".replace("e+", "e")


def _config_value(key: str, value: Any) -> str:
    if key == "model_params" and isinstance(value, (int, float)):
        return f"{value / 1e6:,.1f} M"
    return "-" if value is None else str(value)


def _alignment(a: Alignment) -> str:
    lo, hi = a.mre_window
    rows = [
        ["variance, mean of d²", f"steps 1..{a.steps_compared}", _sci(a.variance), f"&le; {_sci(a.variance_limit)}"],
        ["mean relative error |d|/r", f"steps {lo}..{hi}", _sci(a.mre), f"&lt; {_sci(a.mre_limit)}"],
        ["max |d|", "all steps", _sci(a.max_abs_dev), "reported"],
        ["first-step error |d₁|/r₁", "step 1", pct(a.first_step_error, 2), "reported"],
    ]
    head = f"<p>{badge(a.verdict)} against the reference <code>{esc(a.reference)}</code></p>"
    reasons = "".join(note(esc(r), "fail") for r in a.reasons)
    return head + table(["figure", "over", "value", "limit"], rows, numeric_from=2) + reasons


def _sci(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e4 or value == 0 else f"{value:.2e}"
