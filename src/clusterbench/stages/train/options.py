"""The fine-tuning benchmark's options, typed once; None where the hardware chooses the default."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from clusterbench import argtypes
from clusterbench.argtypes import add_options, option
from clusterbench.stages.train.presets import PRESETS

DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True)
class TrainOptions:
    """The fine-tuning benchmark's options, each declared once; None where the hardware chooses the default."""

    preset: str | None = option(None, "--preset", group="model", help=", ".join(PRESETS),
                                shown="tiny on CPU, llama-1b on a GPU with 40 GiB or more, else 125m")
    model_config: str | None = option(None, "--model-config", group="model",
                                      help="any causal-LM config.json (fresh weights from --seed)")
    model_path: str | None = option(None, "--model-path", group="model",
                                    help="a local transformers checkpoint directory")
    data: str | None = option(None, "--data", group="task", help="SFT JSONL, alpaca or chat form",
                              shown="the shipped set")
    tokenizer: str | None = option(None, "--tokenizer", group="task", help="tokenizer.json or its directory",
                                   shown="shipped")
    seq_len: int | None = option(None, "--seq-len", type=argtypes.whole(1), group="task", help="tokens per row",
                                 shown="64 CPU, 2048 GPU")
    packing: bool = option(True, "--packing", action=argparse.BooleanOptionalAction, group="task",
                           help="pack examples into full rows, or pad each to --seq-len")
    global_batch: int | None = option(None, "--global-batch", type=argtypes.whole(1), group="task",
                                      help="rows per optimizer step, any world size", shown="16 CPU, 32 GPU")
    micro_batch: int | None = option(None, "--micro-batch", type=argtypes.whole(1), group="task",
                                     help="the most rows per forward pass per rank", shown="4")
    steps: int = option(100, "--steps", type=argtypes.whole(1), group="task", help="optimizer steps")
    warmup_steps: int = option(5, "--warmup-steps", type=argtypes.whole(0), group="task",
                               help="untimed steps before the window")
    lr: float | None = option(None, "--lr", type=argtypes.real(0.0), group="task", help="peak learning rate",
                              shown="1e-3 tiny, else 3e-4")
    lr_warmup_steps: int = option(10, "--lr-warmup-steps", type=argtypes.whole(0), group="task",
                                  help="linear lr ramp, then constant")
    seed: int = option(0, "--seed", type=argtypes.whole(0), group="task", help="weights and data order")
    dtype: str | None = option(None, "--dtype", choices=DTYPES, group="execution", help="the training dtype",
                               shown="float32 CPU, bfloat16 GPU")
    parallel: str = option("ddp", "--parallel", choices=("ddp", "fsdp"), group="execution", help="data parallelism")
    activation_checkpointing: str | None = option(
        None, "--activation-checkpointing", nargs="?", const="full", choices=("full", "selective"), group="execution",
        help="recompute each layer's activations in backward (full), or all but its matmuls' and attention's outputs "
             "(selective)")
    compile: bool = option(False, "--compile", action="store_true", group="execution",
                           help="torch.compile each decoder layer")
    fused_adamw: bool | None = option(None, "--fused-adamw", action=argparse.BooleanOptionalAction, group="execution",
                                      help="AdamW's fused kernel", shown="on a GPU")
    reshard_after_forward: bool = option(
        True, "--reshard-after-forward", action=argparse.BooleanOptionalAction, group="execution",
        help="FSDP frees each layer's gathered parameters after forward and gathers them again for backward; "
             "--no-reshard-after-forward keeps them, for speed")
    peak_tflops: float | None = option(None, "--peak-tflops", type=argtypes.real(0.0), group="execution",
                                       help="peak for MFU (skips table and measurement)")
    reference: str | None = option(None, "--reference", group="alignment", help="reference file or shipped name",
                                   shown="the shipped curve of this preset, device and dtype when the task matches it")
    save_reference: str | None = option(None, "--save-reference", metavar="FILE", group="alignment",
                                        help="write this run as a reference")
    repeats: int = option(1, "--repeats", type=argtypes.whole(1), group="alignment",
                          help="run the task K times; the noise band of --save-reference comes from them")
    mre_limit: float | None = option(None, "--mre-limit", type=argtypes.real(0.0), group="alignment",
                                     help="replace the MRE limit", shown="max(0.02, reference noise band)")
    variance_limit: float | None = option(None, "--variance-limit", type=argtypes.real(0.0, strict=False),
                                          group="alignment", help="replace the variance limit")


def add_limit_arguments(g: Any) -> None:
    """The alignment's limits alone (`clusterbench align`)."""
    add_options(g, TrainOptions, only=("mre_limit", "variance_limit"))
