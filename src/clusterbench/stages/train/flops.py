"""FLOPs of a training step, the peak they are compared with, and the speed summary.

The formulas are docs/methodology.md §4: Megatron-LM's FLOPs of one step of a Llama-style
model (T real tokens, S2 = B·s² for our rows, which attend over the whole row), tgs over the
timed window, TFLOPS per device and MFU against the peak; with activation checkpointing every
decoder layer runs its forward twice, which HFU counts (8 instead of 6 FLOPs per
multiply-accumulate in the layers) and MFU never does. The peak (§3) is the table's by
device name and dtype, else a GEMM measured on the device, and its source is always named.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clusterbench import limits
from clusterbench.hw import peaks
from clusterbench.stages.peaks.records import MatmulPeak
from clusterbench.stages.train.records import StepRow, TrainSummary


@dataclass(frozen=True)
class Dims:
    """The sizes the formula needs (docs/methodology.md §4 letters)."""

    h: int  # hidden size
    f: int  # FFN (intermediate) size
    layers: int
    q: int  # heads × head_dim
    kv: int  # kv_heads × head_dim
    vocab: int


def dims_of(config: dict[str, Any]) -> Dims | None:
    """The shapes the formula needs; None for a config that is not Llama-style (no gated MLP
    sizes), where the formula does not apply and FLOPs are not reported."""
    try:
        h, heads = config["hidden_size"], config["num_attention_heads"]
        head_dim = config.get("head_dim") or h // heads
        return Dims(h=h, f=config["intermediate_size"], layers=config["num_hidden_layers"],
                    q=heads * head_dim, kv=(config.get("num_key_value_heads") or heads) * head_dim,
                    vocab=config["vocab_size"])
    except (KeyError, TypeError):
        return None


def _layer_macs(d: Dims, tokens: int, s2: int) -> int:
    # Per token: gated MLP (3 matrices) + q/k/v/o projections; plus causal-half attention scores.
    return tokens * (d.h * d.f * 3 + (d.h * (d.q + 2 * d.kv) + d.q * d.h)) * d.layers + s2 * d.q * d.layers


def step_flops(d: Dims, tokens: int, s2: int) -> int:
    """Model FLOPs of one optimizer step, no recomputation."""
    return 6 * _layer_macs(d, tokens, s2) + 6 * tokens * d.h * d.vocab


def recompute_flops(d: Dims, tokens: int, s2: int) -> int:
    """Hardware FLOPs with every decoder layer's forward run twice (activation checkpointing)."""
    return 8 * _layer_macs(d, tokens, s2) + 6 * tokens * d.h * d.vocab


@dataclass(frozen=True)
class Peak:
    tflops: float
    source: str  # what a reader needs to trust the MFU


def table_peak(device_name: str, dtype: str) -> Peak | None:
    value = limits.peak_tflops(device_name, dtype)
    return None if value is None else Peak(value, f"table: {device_name} {dtype} {value:g}")


def measured_peak(device: str, dtype: str) -> MatmulPeak:
    """A brief GEMM on this rank's device (a size that fits a CPU, 8192³ on a GPU)."""
    if device.startswith("cpu"):
        return peaks.measure_matmul_tflops(device, dtype, n=1024, seconds=0.5)
    return peaks.measure_matmul_tflops(device, dtype, seconds=1.0)


def measured_source(n: int, dtype: str, tflops: float, ranks: int) -> str:
    where = f", mean of {ranks} ranks" if ranks > 1 else ""
    return f"measured: torch.mm {n}^3 {dtype} = {tflops:.4g} TFLOP/s{where}"


def summarize(steps: list[StepRow], window_s: float, world_size: int, dims: Dims | None,
              global_batch: int, seq_len: int, recompute: bool, peak: Peak) -> TrainSummary:
    """Speed figures of the timed window from the per-step rows."""
    window = [s for s in steps if s.in_window]
    devices_s = world_size * window_s
    real = sum(s.real_tokens for s in window)
    padded = sum(s.tokens for s in window)
    s2 = global_batch * seq_len**2
    counted = window if dims is not None else []
    flops = [step_flops(dims, s.real_tokens, s2) for s in counted]
    hw = [recompute_flops(dims, s.real_tokens, s2) for s in counted]
    tflops = sum(flops) / devices_s / 1e12 if flops and devices_s > 0 else None
    hw_tflops = sum(hw) / devices_s / 1e12 if hw and devices_s > 0 else None
    return TrainSummary(
        steps_done=len(steps),
        tokens=real,
        window_s=window_s,
        tgs=real / devices_s if devices_s > 0 else None,
        padded_tgs=padded / devices_s if devices_s > 0 and padded != real else None,
        flops_per_step=sum(flops) / len(flops) if flops else None,
        tflops_per_device=tflops,
        mfu=tflops / peak.tflops if tflops is not None else None,
        hfu=hw_tflops / peak.tflops if recompute and hw_tflops is not None else None,
        peak_tflops=peak.tflops,
        peak_source=peak.source,
    )
