"""A run flattened into named numbers: the common ground of verdicts, compare, rules and baselines.

Each stage puts its own family of metrics (its `metrics` in clusterbench/stages/, through the
analyse module of its topic); clusterbench.stages.registry.metrics_of walks the stages and ends with
run_wide() here.

Names (docs/methodology.md §6): comm.<op>.busbw_gbps.<small|medium|large|avg|top> (mean busbw in
Gbps over a size class; avg is nccl-tests' mean over all sizes; top the sizes of at least a
quarter of the largest), comm.<op>.busbw_gbps@<bytes> per exact size, comm.<op>.link_share
(top busbw against the link's theoretical one-direction figure), comm.<op>.wrong and
comm.wrong (all ops and pairs), comm.<intra|inter>.<op>.busbw_gbps.worst (the worst node or
rail), comm.pairwise.<within|across>_nodes.gbps (class medians), comm.pairwise.flagged (slow
nodes and ranks), nccl.* (what NCCL's log says: nccl/metrics.py), hardware.pcie.downtrained,
hardware.affinity.far_from_gpu (ranks pinned to another NUMA node than their GPU),
train.<summary figure>, train.completed, train.alignment.<figure>, canary.completed and
canary.alignment.<figure> (the numerics canary), peaks.matmul.<dtype>.tflops, peaks.copy.gbps,
telemetry.<throttled|ecc_grown|stragglers> (telemetry/metrics.py), fleet.<excluded|suspects|
flaky_links|odd_facts> (stages/fleet/conclusion.py), and run.failed (only in a
run that did not complete).

Beside the values: a note that puts a value in words for a verdict line, and for a metric
this kind of run could have but this one has not, the reason (a CPU has no link table). A figure
that is NaN or infinite (a NaN loss, a division by a zero time) was not measured: it is kept as
missing, with that reason, so no rule and no comparison can pass it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from clusterbench.nccl.metrics import nccl_values
from clusterbench.results.run import Run
from clusterbench.telemetry.metrics import telemetry_values

SMALL_MAX_BYTES = 64 * 1024  # below: latency-bound sizes
MEDIUM_MAX_BYTES = 16 * 1024**2  # from here on: bandwidth-bound sizes
SIZE_CLASSES = ("small", "medium", "large")


@dataclass(frozen=True)
class Kind:
    """Which way is better for metrics whose name matches `pattern`, and what change is noise."""

    pattern: str
    better: str | None  # "higher", "lower", or None: shown, never judged by default
    floor: float = 0.0  # a worsening smaller than this (absolute) is not a failure


# First match wins. The alignment floors are a tenth of the limits (MRE 0.02, first step 0.5 %):
# two runs both well inside the limit must not fail on a relative change of tiny numbers.
# Variance and max |d| scale with the reference's own noise, so compare only shows them;
# alignment.pass (the run's own verdict) and rules judge them.
KINDS: tuple[Kind, ...] = (
    Kind(r"comm\.(.*\.)?(wrong|flagged)", "lower"),
    Kind(r"comm\..*\.(busbw_gbps.*|link_share)", "higher"),
    Kind(r"(train|canary)\.completed|(train|canary)\.alignment\.pass", "higher"),
    Kind(r"(train|canary)\.alignment\.mre", "lower", floor=0.002),
    Kind(r"(train|canary)\.alignment\.first_step_error", "lower", floor=0.0005),
    Kind(r"(train|canary)\.alignment\..*", None),
    Kind(r"train\.peak_memory_bytes|train\.straggler\..*|hardware\.(pcie\.downtrained|affinity\..*)|run\.failed|fleet\..*", "lower"),
    Kind(r"nccl\.net\.(socket_with_rdma|sockets_between_nodes)|nccl\.p2p\.shm_between_nvlink_gpus", "lower"),
    Kind(r"nccl\.net\.gdr", "higher"),
    Kind(r"nccl\..*", None),
    Kind(r"telemetry\..*", "lower"),
    Kind(r".*\.(tgs|padded_tgs|tflops_per_device|mfu|hfu|tflops|gbps)", "higher"),
)


def kind_of(name: str) -> Kind:
    for kind in KINDS:
        if re.fullmatch(kind.pattern, name):
            return kind
    return Kind(".*", None)


def size_class(size_bytes: int) -> str:
    if size_bytes < SMALL_MAX_BYTES:
        return "small"
    return "medium" if size_bytes < MEDIUM_MAX_BYTES else "large"


def bandwidth_unit(name: str) -> str | None:
    """The unit a bandwidth metric is kept in: Gbps (bits, as comm prints) or GB/s (bytes, the copy peak)."""
    if name == "peaks.copy.gbps":
        return "GB/s"
    return "Gbps" if "busbw_gbps" in name or name.endswith(".gbps") else None


def is_per_size(name: str) -> bool:
    return "@" in name


@dataclass
class Metrics:
    values: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # a value in words
    absent: dict[str, str] = field(default_factory=dict)  # why this run has no such metric
    not_run: dict[str, str] = field(default_factory=dict)  # metric families (comm, train, ...): why their stage did not run

    def put(self, name: str, value: float, note: str | None = None) -> None:
        value = float(value)
        if not math.isfinite(value):
            self.values.pop(name, None)
            self.notes.pop(name, None)
            self.absent[name] = f"{name} is {value}: not a measurement" + (f" ({note})" if note else "")
            return
        self.values[name] = value
        if note:
            self.notes[name] = note


def run_wide(run: Run, m: Metrics) -> None:
    """The metrics of no stage in particular, once every stage has put its own: what NCCL's log and
    the telemetry say, and whether the run failed."""
    for name, (value, note) in nccl_values(run).items():
        m.put(name, value, note)
    for name, (value, note) in telemetry_values(run).items():
        m.put(name, value, note)
    if run.status != "complete":  # absent from a run that completed, so it adds no line to its verdicts
        m.put("run.failed", 1, run.error or f"the run is {run.status}")


def mean(values: list[float]) -> float:
    return sum(values) / len(values)
