"""The fine-tuning benchmark's options, typed once; None where the hardware chooses the default."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from clusterbench import argtypes
from clusterbench.stages.train.presets import PRESETS

DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True)
class TrainOptions:
    preset: str | None = None  # None: tiny on a CPU, llama-1b on a GPU with 40 GiB or more, else 125m
    model_config: str | None = None
    model_path: str | None = None
    data: str | None = None
    tokenizer: str | None = None
    seq_len: int | None = None
    packing: bool = True
    global_batch: int | None = None
    micro_batch: int | None = None
    steps: int = 100
    warmup_steps: int = 5
    lr: float | None = None  # None: 1e-3 for tiny, else 3e-4
    lr_warmup_steps: int = 10
    seed: int = 0
    dtype: str | None = None  # None: float32 on a CPU, bfloat16 on a GPU
    parallel: str = "ddp"
    activation_checkpointing: str | None = None  # "full" or "selective"
    compile: bool = False
    fused_adamw: bool | None = None  # None: on a GPU
    reshard_after_forward: bool = True
    peak_tflops: float | None = None
    reference: str | None = None
    save_reference: str | None = None
    repeats: int = 1
    mre_limit: float | None = None
    variance_limit: float | None = None


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--preset", help=f"{', '.join(PRESETS)} (default: tiny on CPU, "
                   "llama-1b on a GPU with 40 GiB or more, else 125m)")
    g.add_argument("--model-config", help="any causal-LM config.json (fresh weights from --seed)")
    g.add_argument("--model-path", help="a local transformers checkpoint directory")
    g = p.add_argument_group("task")
    g.add_argument("--data", help="SFT JSONL, alpaca or chat form (default: the shipped set)")
    g.add_argument("--tokenizer", help="tokenizer.json or its directory (default: shipped)")
    g.add_argument("--seq-len", type=argtypes.whole(1), help="tokens per row (default 64 CPU, 2048 GPU)")
    g.add_argument("--packing", action=argparse.BooleanOptionalAction,
                   help="pack examples into full rows (default) or pad each to --seq-len")
    g.add_argument("--global-batch", type=argtypes.whole(1), help="rows per optimizer step, any world size "
                   "(default 16 CPU, 32 GPU)")
    g.add_argument("--micro-batch", type=argtypes.whole(1), help="the most rows per forward pass per rank (default 4)")
    g.add_argument("--steps", type=argtypes.whole(1), help="optimizer steps (default 100)")
    g.add_argument("--warmup-steps", type=argtypes.whole(0), help="untimed steps before the window (default 5)")
    g.add_argument("--lr", type=argtypes.real(0.0), help="peak learning rate (default 1e-3 tiny, else 3e-4)")
    g.add_argument("--lr-warmup-steps", type=argtypes.whole(0), help="linear lr ramp, then constant (default 10)")
    g.add_argument("--seed", type=argtypes.whole(0), help="weights and data order (default 0)")
    g = p.add_argument_group("execution")
    g.add_argument("--dtype", choices=DTYPES, help="default float32 CPU, bfloat16 GPU")
    g.add_argument("--parallel", choices=("ddp", "fsdp"), help="data parallelism (default ddp)")
    g.add_argument("--activation-checkpointing", nargs="?", const="full", choices=("full", "selective"),
                   help="recompute each layer's activations in backward (full), or all but its matmuls' and "
                   "attention's outputs (selective)")
    g.add_argument("--compile", action="store_true", help="torch.compile each decoder layer")
    g.add_argument("--fused-adamw", action=argparse.BooleanOptionalAction,
                   help="AdamW's fused kernel (default: on a GPU)")
    g.add_argument("--reshard-after-forward", action=argparse.BooleanOptionalAction,
                   help="FSDP frees each layer's gathered parameters after forward and gathers them again "
                   "for backward (default); --no-reshard-after-forward keeps them, for speed")
    g.add_argument("--peak-tflops", type=argtypes.real(0.0), help="peak for MFU (skips table and measurement)")
    g = p.add_argument_group("alignment")
    g.add_argument("--reference", help="reference file or shipped name (default: the shipped curve of this "
                   "preset, device and dtype when the task matches it)")
    g.add_argument("--save-reference", metavar="FILE", help="write this run as a reference")
    g.add_argument("--repeats", type=argtypes.whole(1), help="run the task K times; the noise band of "
                   "--save-reference comes from them (default 1)")
    add_limit_arguments(g)


def add_limit_arguments(g: Any) -> None:
    g.add_argument("--mre-limit", type=argtypes.real(0.0), help="replace the MRE limit (default "
                   "max(0.02, reference noise band))")
    g.add_argument("--variance-limit", type=argtypes.real(0.0, strict=False), help="replace the variance limit")
