"""What a rank holds of the model's training state, by the same accounting for every size.

The state trained here keeps float32 parameters (FSDP's mixed precision casts a copy per layer for
compute), float32 gradients and AdamW's two float32 moments: 16 bytes a parameter. DDP holds all of
it on every rank, plus its gradient buckets (another 4 bytes: the buckets are not views of the
gradients unless gradient_as_bucket_view); FSDP holds 1/N of it, plus the groups gathered while they
run. docs/methodology.md §4 "Memory per rank".
"""

from __future__ import annotations

from dataclasses import dataclass

STATE_BYTES = 16  # float32 parameter, gradient, AdamW exp_avg and exp_avg_sq
DDP_BUCKET_BYTES = 4  # DDP's reducer buckets: one more float32 gradient


@dataclass(frozen=True)
class StatePerRank:
    """Bytes of parameters, gradients and optimizer state one rank holds."""

    parallel: str
    world_size: int
    bytes: int

    def text(self, params: int) -> str:
        if self.parallel == "ddp":
            sharded = model_state(params, self.world_size, "fsdp")
            return (f"whole on every rank under DDP; --parallel fsdp would hold {sharded.bytes / 2**30:.3g} GiB "
                    f"on each of {self.world_size} ranks" if self.world_size > 1 else "whole, on one rank")
        return f"sharded over {self.world_size} rank{'s' if self.world_size > 1 else ''}"


def model_state(params: int, world_size: int, parallel: str) -> StatePerRank:
    if parallel == "ddp":
        return StatePerRank(parallel, world_size, params * (STATE_BYTES + DDP_BUCKET_BYTES))
    return StatePerRank(parallel, world_size, -(-params * STATE_BYTES // world_size))
