"""Selective activation checkpointing: backward recomputes a layer's cheap ops, not its matmuls.

Full checkpointing keeps only each decoder layer's input and runs the layer's forward again in
backward: a third more FLOPs for the least memory. Selective keeps the outputs of the matmuls and
of attention, the ops that cost FLOPs, and recomputes the rest (norms, activation functions,
rotary embeddings, casts and adds): most of full's saving of elementwise activations at almost no
extra FLOPs. Saved or recomputed, every value is the same, so the task does not change.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

_aten = torch.ops.aten
# Matmuls and every attention kernel SDPA may pick, on any device.
SAVED = {_aten.mm.default, _aten.addmm.default, _aten.bmm.default, _aten.linear.default,
         _aten._scaled_dot_product_flash_attention.default, _aten._scaled_dot_product_efficient_attention.default,
         _aten._scaled_dot_product_cudnn_attention.default, _aten._scaled_dot_product_flash_attention_for_cpu.default}


def _policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in SAVED else CheckpointPolicy.PREFER_RECOMPUTE


def selective() -> tuple[Any, Any]:
    """The context pair torch.utils.checkpoint's context_fn asks for."""
    return create_selective_checkpoint_contexts(_policy)
