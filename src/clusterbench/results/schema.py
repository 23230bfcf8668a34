"""run.json: every section as a typed record, the one layout every command writes and reads.

Version 7 (this one) against version 6: the pair rows live in pairs.csv alone, and run.json says how many
it holds (`pair_rows`): a fleet of thousands of nodes rewrote millions of rows with every save; each
fleet retest names the suspect it is a healthy partner's proof for (`suspect`), which version 6 said in
its `why` alone; a fleet's node probes keep their facts, not their node's whole hardware picture; and a
fleet's `coverage`, `racks` and `bad_switches`, which older folders lack. Version 6 against version 5:
`comm_options.rotate`, whether each call's buffers moved to the next offset of memory (comm/rotation.py);
the sweeps of older folders held theirs still and read as false. Version 5 against version 4: a fleet's qualification (`fleet`, docs/methodology.md §16)
and the ranks a failed job lost (`lost`), which older folders lack and read as empty. Version 4
against version 3: the alpha-beta model's section is `cost_model` (version 3
called it `model`, beside the fine-tuned model's own fields), and `extra` holds the sections of
stages the schema does not name (docs/architecture.md). Version 3 against version 2: each
`expected` figure is a record that says where it comes from (version 2 kept a bare number, given
with --expect-busbw), and the new `expected_note`, `canary`, `telemetry` and each rank's CPUs and
NUMA nodes, which older folders lack and read as empty. Version 2 against 1: a "kind" key, a GPU's
PCIe fields grouped under "pcie", `expected` figures, a train section's `reference_note` and
summary `stop_reason`, verdicts that may be SKIP (not judged), and strict JSON (a NaN loss is
null). Older folders are read through `upgrade_v1` to `upgrade_v6`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from clusterbench import __version__
from clusterbench.inputs.documents import whole_number
from clusterbench.results.codec import (
    AT_LEAST_ONE,
    ELAPSED_S,
    IN_CSV,
    MESSAGE_BYTES,
    MICROSECONDS,
    NONNEGATIVE,
    POSITIVE,
    TICKS_US,
    SchemaError,
    bounds,
)
from clusterbench.results.cost_model import CostModel
from clusterbench.results.fleet import Fleet
from clusterbench.results.hardware import Hardware, Peaks
from clusterbench.results.nccl import NcclFacts
from clusterbench.results.telemetry import Telemetry

RUN_KIND = "clusterbench-run"
SCHEMA_VERSION = 7
Status = Literal["running", "complete", "failed", "interrupted"]


@dataclass(frozen=True)
class Placement:
    """Where one rank ran."""

    rank: int = field(metadata=NONNEGATIVE)
    node: str
    local_rank: int = field(metadata=NONNEGATIVE)
    device: str
    cpus: str | None = None  # the CPUs it may run on, in the kernel's list form (0-55,112-167)
    cpu_numa: list[int] = field(default_factory=list)  # the NUMA nodes of those CPUs
    device_numa: int | None = None  # its GPU's NUMA node


@dataclass
class Env:
    """Facts every run records; `hosts` and `devices` come from every rank."""

    hostname: str
    python: str | None = None
    platform: str | None = None
    clusterbench: str | None = None
    torch: str | None = None
    cuda: str | None = None
    backend: str | None = None
    backend_version: str | None = None
    world_size: int | None = field(default=None, metadata=AT_LEAST_ONE)
    device_type: str | None = None
    hosts: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    ranks: list[Placement] = field(default_factory=list)  # by rank


@dataclass(frozen=True)
class CommOptions:
    """The comm sweep as asked for (defaults: `clusterbench comm`'s own)."""

    ops: tuple[str, ...] = ("all_reduce",)
    bidirectional: bool = False  # pt2pt sends both ways at once
    min_bytes: int = field(default=8, metadata=MESSAGE_BYTES)
    # None: the device's default (64 MiB CPU; 1 GiB capped by free memory GPU)
    max_bytes: int | None = field(default=None, metadata=MESSAGE_BYTES)
    step_factor: float = field(default=2.0, metadata=bounds(1))
    dtype: str = "float32"
    reduce_op: str = "sum"
    in_place: bool = False
    root: int = field(default=0, metadata=NONNEGATIVE)
    iters: int | None = field(default=None, metadata=AT_LEAST_ONE)  # None: auto
    warmup: int = field(default=5, metadata=NONNEGATIVE)
    time_budget_s: float = field(default=0.05, metadata=POSITIVE)
    rank_time: str = "max"
    timing: str | None = None  # stamps, loop or graph; None: loop on GPUs, stamps on CPUs
    check: bool = True
    rotate: bool = True  # buffers' offsets moved between calls, as nccl-tests does (comm/rotation.py)
    unit: str = "Gbps"
    scope: str = "global"  # global, intra, inter or all (docs/methodology.md §8)
    pattern: str = "single"  # single (the sweep), ring, incast or pairwise
    flag_below: float = field(default=0.8, metadata=NONNEGATIVE)  # pairwise: flag what is below this fraction of its class's median
    nodes_only: bool = False  # pairwise: one rank per node
    nccl_algos: tuple[str, ...] = ()  # sweep once per NCCL_ALGO (scope "algo") in place of the global sweep
    algos: tuple[str, ...] = ("native",)  # --algo: the native op and/or send/recv algorithms, side by side


@dataclass(frozen=True)
class CommRow:
    """One message size of one collective, as printed and as stored (docs/methodology.md §1)."""

    op: str
    size_bytes: int = field(metadata=MESSAGE_BYTES)
    count: int = field(metadata=AT_LEAST_ONE)
    dtype: str
    world_size: int = field(metadata=AT_LEAST_ONE)
    in_place: bool
    duration_us: float = field(metadata=MICROSECONDS)  # the mean: the sweep divides the size by it
    throughput_gbps: float = field(metadata=NONNEGATIVE)
    busbw_gbps: float = field(metadata=NONNEGATIVE)
    wrong: int = field(metadata=NONNEGATIVE)
    iters: int = field(metadata=AT_LEAST_ONE)
    p50_us: float = field(metadata=TICKS_US)
    p99_us: float = field(metadata=TICKS_US)
    min_us: float = field(metadata=TICKS_US)
    max_us: float = field(metadata=TICKS_US)
    cv: float = field(metadata=NONNEGATIVE)
    reduce_op: str | None = None
    root: int | None = field(default=None, metadata=NONNEGATIVE)
    scope: str = "global"
    team: str = "all"  # the ranks measured together: all, a node's name, or "rail k"
    nodes: int = field(default=1, metadata=AT_LEAST_ONE)  # the nodes those ranks span
    timing: str = "stamps"  # how it was timed: stamps (p50..cv over calls), loop or graph (over batches)
    algo: str = "native"  # the backend's own op, or a send/recv algorithm of comm/algos.py (scope "algo")

    @property
    def description(self) -> str:
        text = f"{self.count} x {self.dtype}"
        if self.reduce_op:
            text += f" {self.reduce_op}"
        return text + (" in-place" if self.in_place else "")


@dataclass(frozen=True, slots=True)  # slots: a fleet measuring every pair of 2,048 nodes holds 4.2 million
class PairRow:
    """--pattern pairwise: one direction of one pair, as its receiver measured it (docs/methodology.md §8)."""

    src: int = field(metadata=NONNEGATIVE)
    dst: int = field(metadata=NONNEGATIVE)
    src_node: str
    dst_node: str
    size_bytes: int = field(metadata=MESSAGE_BYTES)
    gbps: float = field(metadata=NONNEGATIVE)  # src -> dst, one message stream alone on the pair's links
    latency_us: float = field(metadata=TICKS_US)  # half the round trip of a small message between the two
    wrong: int = field(metadata=NONNEGATIVE)
    round: int = field(default=0, metadata=NONNEGATIVE)


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
    model_state_bytes: int | None = field(default=None, metadata=NONNEGATIVE)  # per rank (train/memory.py)
    weights: str | None = None  # where each rank's weights came from (train/models.py)
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


@dataclass(frozen=True)
class Expected:
    """What systems like this one measure for a metric, and who says so (docs/methodology.md §11)."""

    value: float = field(metadata=POSITIVE)  # in the metric's own unit (busbw in Gbps, as run.json keeps it)
    origin: Literal["given", "file", "shipped"]  # --expect-busbw, --expected FILE, the shipped table
    system: str  # what it was measured on
    source: str  # where it was published, or the file it came from
    low: float | None = field(default=None, metadata=POSITIVE)  # the published range, where the source gives one
    high: float | None = field(default=None, metadata=POSITIVE)
    note: str | None = None

    def __post_init__(self) -> None:
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"its range is empty: low {self.low:g} is above high {self.high:g}")


@dataclass(frozen=True)
class Verdict:
    check: str
    status: Literal["PASS", "WARN", "FAIL", "SKIP"]  # SKIP: not judged, `detail` says why
    detail: str


@dataclass(frozen=True)
class Lost:
    """A rank the job lost: it died, hung or stopped answering while the others went on."""

    rank: int = field(metadata=NONNEGATIVE)
    node: str
    during: str | None = None  # where it last said it was


@dataclass
class Run:
    """A run folder's run.json."""

    schema_version: int = SCHEMA_VERSION
    kind: str = RUN_KIND
    tool: str = "clusterbench"
    version: str = __version__
    command: str = ""
    argv: list[str] = field(default_factory=list)
    uid: str = ""  # this run, wherever its folder is copied: what the results store knows it by
    started_utc: str = ""
    finished_utc: str | None = None
    status: Status = "running"
    error: str | None = None
    env: Env = field(default_factory=lambda: Env(hostname=""))
    hardware: Hardware | None = None
    peaks: Peaks | None = None
    comm_options: CommOptions | None = None
    comm: list[CommRow] = field(default_factory=list)
    pairs: list[PairRow] = field(default_factory=list, metadata=IN_CSV)  # pairs.csv's rows, read with the folder
    pair_rows: int = field(default=0, metadata=NONNEGATIVE)  # how many rows pairs.csv held at the last save
    cost_model: CostModel | None = None  # the alpha-beta model fitted to this run's comm rows (§14)
    nccl: NcclFacts | None = None  # what NCCL's own log says it found and chose (docs/methodology.md §9)
    telemetry: Telemetry | None = None  # device telemetry per stage; its samples: telemetry.csv (§10)
    train: Train | None = None
    train_steps: list[StepRow] = field(default_factory=list)
    canary: Train | None = None  # the tiny float32 task on this hardware, judged against the CPU curve
    fleet: Fleet | None = None  # every node a row, the nodes to take out (§16)
    lost: list[Lost] = field(default_factory=list)  # in a failed run: the ranks that went silent
    expected: dict[str, Expected] = field(default_factory=dict)  # figures rules judge against, by metric
    expected_note: str | None = None  # why the shipped table matched nothing, or what it could not compare
    verdicts: list[Verdict] = field(default_factory=list)
    verdict: Literal["PASS", "WARN", "FAIL"] | None = None
    # Sections of stages the schema does not name, by section name, as plain JSON values: a stage
    # module reads its own back with codec.load and its record type.
    extra: dict[str, Any] = field(default_factory=dict)


def upgrade_v4(doc: dict[str, Any]) -> dict[str, Any]:
    """A version-4 run.json in version 5's layout: the same, without a fleet or lost ranks."""
    return {**doc, "schema_version": 5}


def upgrade_v5(doc: dict[str, Any]) -> dict[str, Any]:
    """A version-5 run.json in version 6's layout: its sweep timed every call on the same buffers."""
    doc = {**doc, "schema_version": 6}
    if isinstance(doc.get("comm_options"), dict):
        doc["comm_options"] = {"rotate": False, **doc["comm_options"]}
    return doc


def upgrade_v6(doc: dict[str, Any]) -> dict[str, Any]:
    """A version-6 run.json in version 7's layout: its pairs are in it (and read from it), and its fleet's retests
    of a suspect against a healthy partner said so in their `why` alone."""
    doc = {**doc, "schema_version": 7}
    if isinstance(doc.get("pairs"), list):
        doc["pair_rows"] = len(doc["pairs"])
    fleet = doc.get("fleet")
    if isinstance(fleet, dict) and isinstance(fleet.get("probes"), list):
        doc["fleet"] = fleet = {**fleet, "probes": [{k: v for k, v in p.items() if k != "hardware"}
                                                   if isinstance(p, dict) else p for p in fleet["probes"]]}
    if isinstance(fleet, dict) and isinstance(fleet.get("retests"), list):
        retests = []
        for t in fleet["retests"]:
            if isinstance(t, dict) and isinstance(t.get("why"), str) and (
                    found := re.fullmatch(r"suspect (.+) against healthy .+", t["why"])):
                t = {**t, "suspect": found.group(1)}
            retests.append(t)
        doc["fleet"] = {**fleet, "retests": retests}
    return doc


def upgrade_v1(doc: dict[str, Any]) -> dict[str, Any]:
    """A version-1 run.json in version 2's layout."""
    doc = {**doc, "kind": RUN_KIND, "schema_version": 2}
    hardware = doc.get("hardware")
    if isinstance(hardware, dict) and isinstance(hardware.get("gpus"), list):
        gpus = []
        for gpu in hardware["gpus"]:
            if isinstance(gpu, dict):
                pcie = {k.removeprefix("pcie_"): v for k, v in gpu.items() if k.startswith("pcie_")}
                gpu = {k: v for k, v in gpu.items() if not k.startswith("pcie_")} | {"pcie": pcie}
            gpus.append(gpu)
        doc["hardware"] = {**hardware, "gpus": gpus}
    options = doc.get("comm_options")
    if isinstance(options, dict):
        # Version 1 kept the resolved sweep: its bounds and step, and pt2pt's direction in the op's name.
        sizes, ops = options.get("sizes") or [8], options.get("ops") or []
        if not isinstance(sizes, list) or not all(whole_number(s) and s > 0 for s in sizes):
            raise SchemaError("comm_options.sizes", "expected a list of sizes in bytes (whole numbers from 1)")
        if not isinstance(ops, list):
            raise SchemaError("comm_options.ops", "expected a list of op names")
        sizes, ops = sorted(sizes), [str(op) for op in ops]
        kept = {k: v for k, v in options.items() if k not in ("sizes", "fit_device_memory")}
        doc["comm_options"] = kept | {
            "min_bytes": sizes[0], "max_bytes": sizes[-1],
            "step_factor": sizes[1] / sizes[0] if len(sizes) > 1 else 2.0,
            "ops": [op.replace("pt2pt_bidir", "pt2pt") for op in ops], "bidirectional": "pt2pt_bidir" in ops}
    return doc


def upgrade_v2(doc: dict[str, Any]) -> dict[str, Any]:
    """A version-2 run.json in version 3's layout: its expected figures came from --expect-busbw."""
    expected = doc.get("expected")
    if isinstance(expected, dict):
        expected = {name: {"value": value, "origin": "given", "system": "this cluster",
                           "source": "--expect-busbw"} for name, value in expected.items()}
    return {**doc, "schema_version": 3, "expected": expected if expected is not None else {}}


def upgrade_v3(doc: dict[str, Any]) -> dict[str, Any]:
    """A version-3 run.json in version 4's layout: its `model` section is the cost model."""
    upgraded = {key: value for key, value in doc.items() if key != "model"}
    return upgraded | {"schema_version": 4, "cost_model": doc.get("model")}
