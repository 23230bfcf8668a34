"""The train section: speed cards, the loss curve against its reference, the alignment verdict."""

from __future__ import annotations

from typing import Any

from clusterbench.report.blocks import badge, card, cards, esc, facts, note, num, pct, section, table
from clusterbench.report.plots import loss_plot

_CONFIG_KEYS = ("preset", "model_params", "parallel", "dtype", "world_size", "global_batch", "micro_batch",
                "grad_accum", "seq_len", "packing", "steps", "warmup_steps", "lr", "seed", "task",
                "activation_checkpointing")


def plot_count(train: dict[str, Any]) -> int:
    return 1 if train.get("losses") else 0


def train_section(train: dict[str, Any]) -> str:
    config = train.get("config") or {}
    s = train.get("summary") or {}
    body = cards(_speed_cards(s))
    body += facts((key, esc(_config_value(key, config.get(key)))) for key in _CONFIG_KEYS if key in config)
    align = train.get("alignment")
    losses = train.get("losses") or []
    plot = ""
    if losses:
        reference = align.get("reference_losses") if align else None
        plot = loss_plot("train-loss", losses, reference)
    judged = _alignment(align) if align else note(
        "No reference curve for this task and preset: loss alignment was not judged.")
    body += f'<h3>Loss per optimizer step</h3><div class="op"><div>{plot}</div><div>{judged}</div></div>'

    if s.get("status") not in (None, "complete"):
        body += note(f"Training status: <b>{esc(s['status'])}</b>.", "fail")
    lead = ("tgs = real tokens / devices / second over the timed window (after warm-up); "
            "MFU = model FLOPs per device per second / peak (activation recomputation is in HFU, not MFU).")
    return section("train", "Fine-tuning", body, lead=lead)


def _speed_cards(s: dict[str, Any]) -> list[str]:
    window = f"{esc(s.get('steps_done'))} steps, {num(s.get('window_s'))} s window"
    padded = f"{num(s['padded_tgs'])} with padding" if s.get("padded_tgs") is not None else window
    peak = f"of {num(s.get('peak_tflops'))} TFLOP/s, {esc(s.get('peak_source'))}"
    items = [
        card("tgs", num(s.get("tgs"), 4), f"tokens / GPU / s; {padded}"),
        card("TFLOPS / device", num(s.get("tflops_per_device")), _flop(s.get("flops_per_step"))),
        card("MFU", pct(s.get("mfu")), peak),
    ]
    if s.get("hfu") is not None:
        items.append(card("HFU", pct(s["hfu"]), "with recomputation"))
    if s.get("peak_memory_bytes") is not None:
        kind = esc(s.get("peak_memory_kind") or "")
        items.append(card("peak memory", f"{s['peak_memory_bytes'] / 2**30:.2f} GiB", kind))
    items.append(card("tokens", f"{s.get('tokens') or 0:,}", window))
    return items


def _flop(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g} FLOP per step".replace("e+", "e")


def _config_value(key: str, value: Any) -> str:
    if key == "model_params" and isinstance(value, (int, float)):
        return f"{value / 1e6:,.1f} M"
    return "-" if value is None else str(value)


def _alignment(a: dict[str, Any]) -> str:
    lo, hi = a.get("mre_window") or ["?", "?"]
    rows = [
        ["variance, mean of d²", f"steps 1..{a.get('steps_compared', '?')}", _sci(a.get("variance")),
         f"&lt; {_sci(a.get('variance_limit'))}"],
        ["mean relative error |d|/r", f"steps {lo}..{hi}", _sci(a.get("mre")),
         f"&lt; {_sci(a.get('mre_limit'))}"],
        ["max |d|", "all steps", _sci(a.get("max_abs_dev")), "reported"],
        ["first-step error |d₁|/r₁", "step 1", pct(a.get("first_step_error"), 2), "reported"],
    ]
    verdict = a.get("verdict", "?")
    head = f"<p>{badge(verdict)} against the reference <code>{esc(a.get('reference'))}</code></p>"
    reasons = "".join(note(esc(r), "fail") for r in a.get("reasons") or [])
    return head + table(["figure", "over", "value", "limit"], rows, numeric_from=2) + reasons


def _sci(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e4 or value == 0 else f"{value:.2e}"
