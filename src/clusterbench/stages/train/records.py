"""run.json's sections of the fine-tuning benchmark: its task, its steps (also train_steps.csv), its speed
figures, its loss curve against a reference, and each rank's step split (docs/methodology.md §4, §5)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from clusterbench.results.codec import AT_LEAST_ONE, ELAPSED_S, NONNEGATIVE, POSITIVE
from clusterbench.results.documents import DocumentKind
from clusterbench.results.run import Section


@dataclass(frozen=True)
class TrainConfig:
    """What defines the fine-tuning task; the comparable part of it is a reference's identity."""

    preset: str
    model_params: int | None = field(metadata=AT_LEAST_ONE)
    model_config: dict[str, Any]
    model_hash: str
    parallel: str
    dtype: str
    world_size: int = field(metadata=AT_LEAST_ONE)
    global_batch: int = field(metadata=AT_LEAST_ONE)
    micro_batch: int = field(metadata=AT_LEAST_ONE)
    grad_accum: int = field(metadata=AT_LEAST_ONE)
    seq_len: int = field(metadata=AT_LEAST_ONE)
    packing: bool
    steps: int = field(metadata=AT_LEAST_ONE)
    warmup_steps: int = field(metadata=NONNEGATIVE)
    lr: float = field(metadata=NONNEGATIVE)
    lr_warmup_steps: int = field(metadata=NONNEGATIVE)
    seed: int
    task: str
    activation_checkpointing: bool = False
    repeats: int = field(default=1, metadata=AT_LEAST_ONE)
    # Levers that leave the task as it is (docs/methodology.md §4 "Levers"); fused_adamw None: not recorded.
    selective_checkpointing: bool = False
    compiled: bool = False
    fused_adamw: bool | None = None
    reshard_after_forward: bool = True


@dataclass(frozen=True)
class StepRow:
    step: int = field(metadata=NONNEGATIVE)
    loss: float | None = field(metadata=NONNEGATIVE)  # null: the loss was not finite
    tokens: int = field(metadata=NONNEGATIVE)  # padded tokens of the global batch
    real_tokens: int = field(metadata=NONNEGATIVE)
    loss_tokens: int = field(metadata=NONNEGATIVE)
    seconds: float = field(metadata=ELAPSED_S)
    in_window: bool
    tgs: float | None = field(metadata=NONNEGATIVE)


@dataclass(frozen=True)
class TrainSummary:
    """Speed figures of the timed window (docs/methodology.md §4)."""

    steps_done: int = field(metadata=NONNEGATIVE)
    tokens: int = field(metadata=NONNEGATIVE)
    window_s: float = field(metadata=ELAPSED_S)  # 0: no step was timed
    tgs: float | None = field(metadata=NONNEGATIVE)
    padded_tgs: float | None = field(metadata=NONNEGATIVE)
    flops_per_step: float | None = field(metadata=NONNEGATIVE)  # None: no FLOPs formula for this model
    tflops_per_device: float | None = field(metadata=NONNEGATIVE)
    mfu: float | None = field(metadata=NONNEGATIVE)
    hfu: float | None = field(metadata=NONNEGATIVE)
    peak_tflops: float = field(metadata=NONNEGATIVE)
    peak_source: str
    peak_memory_bytes: int | None = field(default=None, metadata=NONNEGATIVE)
    peak_memory_kind: str | None = None
    model_state_bytes: int | None = field(default=None, metadata=NONNEGATIVE)  # per rank (stages/train/memory.py)
    weights: str | None = None  # where each rank's weights came from (stages/train/models.py)
    status: Literal["complete", "nan"] = "complete"
    stop_reason: str | None = None


@dataclass(frozen=True)
class Alignment:
    """The loss curve against a reference (docs/methodology.md §5)."""

    reference: str
    reference_losses: list[float] = field(metadata=NONNEGATIVE)
    steps_compared: int = field(metadata=NONNEGATIVE)
    variance: float | None = field(metadata=NONNEGATIVE)
    mre: float | None = field(metadata=NONNEGATIVE)
    mre_window: tuple[int, ...] = field(metadata=NONNEGATIVE)
    max_abs_dev: float | None = field(metadata=NONNEGATIVE)
    first_step_error: float | None = field(metadata=NONNEGATIVE)
    variance_limit: float = field(metadata=NONNEGATIVE)
    mre_limit: float = field(metadata=NONNEGATIVE)
    verdict: Literal["PASS", "FAIL"]
    reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RankPhases:
    """One rank's timed-window step split by its own clocks, seconds per step (docs/methodology.md §4)."""

    rank: int = field(metadata=NONNEGATIVE)
    node: str
    device: str
    data_s: float = field(metadata=ELAPSED_S)  # the batch made and moved to the device
    forward_s: float = field(metadata=ELAPSED_S)  # forward and loss, every micro-batch
    backward_s: float = field(metadata=ELAPSED_S)  # this rank's backward compute
    sync_s: float = field(metadata=ELAPSED_S)  # the rest of backward (gradient collectives) and the loss all-reduce
    optimizer_s: float = field(metadata=ELAPSED_S)  # clip, step, zero_grad

    @property
    def step_s(self) -> float:
        return self.data_s + self.forward_s + self.backward_s + self.sync_s + self.optimizer_s

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s


@dataclass
class Train:
    config: TrainConfig
    summary: TrainSummary | None = None
    losses: list[float | None] = field(default_factory=list, metadata=NONNEGATIVE)
    alignment: Alignment | None = None
    repeat_losses: list[list[float | None]] = field(default_factory=list)
    reference_note: str | None = None  # why no reference judged this run
    phases: list[RankPhases] = field(default_factory=list)  # by rank; empty in runs made before it was recorded


TRAIN = Section("train", Train | None)
TRAIN_STEPS = Section("train_steps", list[StepRow], list, csv=True)


@dataclass(frozen=True)
class ReferenceModel:
    preset: str
    config_hash: str


@dataclass(frozen=True)
class ReferenceHardware:
    device_type: str | None = None
    devices: list[str] = field(default_factory=list)
    torch: str | None = None


@dataclass(frozen=True)
class LossReference:
    """A reference loss curve and the task that made it (docs/methodology.md §5)."""

    task: str
    model: ReferenceModel
    global_batch: int = field(metadata=AT_LEAST_ONE)
    seq_len: int = field(metadata=AT_LEAST_ONE)
    packing: bool
    steps: int = field(metadata=AT_LEAST_ONE)
    seed: int
    dtype: str
    lr: float = field(metadata=NONNEGATIVE)
    lr_warmup_steps: int = field(metadata=NONNEGATIVE)
    micro_batch: int = field(metadata=AT_LEAST_ONE)
    parallel: str
    world_size: int = field(metadata=AT_LEAST_ONE)
    hardware: ReferenceHardware
    clusterbench_version: str
    command: list[str]
    repeats: int = field(metadata=AT_LEAST_ONE)
    max_relative_deviation: float = field(metadata=NONNEGATIVE)
    noise_band: float = field(metadata=NONNEGATIVE)
    variance_limit: float = field(metadata=NONNEGATIVE)
    mre_limit: float = field(metadata=NONNEGATIVE)
    losses: list[float] = field(metadata=POSITIVE)  # a cross-entropy the alignment divides by
    kind: str = "clusterbench-loss-reference"
    schema_version: int = 1


REFERENCE = DocumentKind(
    "clusterbench-loss-reference", "loss reference", 1, LossReference,
    # Written by 0.1 with "format" in place of "schema_version".
    legacy=lambda doc: doc.get("format") if doc.get("kind") == "clusterbench-loss-reference" else None,
    hint="make one with clusterbench train --save-reference")
