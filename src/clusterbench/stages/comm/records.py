"""run.json's sections of the collective benchmark: the sweep as asked for (`comm_options`), its rows (`comm`,
also comm.csv), the pairwise rows (`pairs`, in pairs.csv alone) and the alpha-beta model fitted to its own
sweep (`cost_model`, docs/methodology.md §14)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from clusterbench.inputs.documents import whole_number
from clusterbench.results.codec import (
    AT_LEAST_ONE,
    MESSAGE_BYTES,
    MICROSECONDS,
    NONNEGATIVE,
    POSITIVE,
    TICKS_US,
    SchemaError,
    bounds,
)
from clusterbench.results.run import Section
from clusterbench.stages.comm.options import CommOptions

LinkName = Literal["intra", "inter"]


@dataclass(frozen=True)
class OpFit:
    """t(S) = alpha + beta * S fitted to one op's rows on one link class."""

    op: str
    link: LinkName
    world_size: int = field(metadata=AT_LEAST_ONE)  # the ranks of the fitted rows
    alpha_us: float = field(metadata=NONNEGATIVE)  # the fit pins a latency or an inverse bandwidth at 0
    beta_us_per_byte: float = field(metadata=NONNEGATIVE)
    # the link's GB/s (bytes) the op's bus traffic implies: busbw factor / beta
    bandwidth_gb_s: float | None = field(metadata=POSITIVE)
    r2: float = field(metadata=bounds(high=1))  # on log time, so that small and large sizes both count
    points: int = field(metadata=bounds(2))  # a line needs two sizes


@dataclass(frozen=True)
class LinkParams:
    """One link class as the ring's steps and bytes see it: per step latency and one-direction bandwidth."""

    link: LinkName
    alpha_us: float = field(metadata=NONNEGATIVE)
    bandwidth_gb_s: float = field(metadata=POSITIVE)
    source: str  # the fit it was derived from, e.g. "all_reduce on 2 ranks"


@dataclass(frozen=True)
class Validation:
    """Fit on every other size, predict the sizes between: the model's error on sizes it has not seen."""

    op: str
    link: LinkName
    median_error: float = field(metadata=NONNEGATIVE)  # relative: |predicted - measured| / measured
    max_error: float = field(metadata=NONNEGATIVE)
    points: int = field(metadata=AT_LEAST_ONE)  # the sizes predicted


@dataclass
class CostModel:
    stat: Literal["p50", "mean", "min"]  # which time of each row was fitted
    fits: list[OpFit] = field(default_factory=list)
    links: list[LinkParams] = field(default_factory=list)
    validation: list[Validation] = field(default_factory=list)
    # the sizes fitted (bytes, both included); None: all of them
    size_range: tuple[int, int] | None = field(default=None, metadata=MESSAGE_BYTES)

    def __post_init__(self) -> None:
        if self.size_range is not None and self.size_range[0] > self.size_range[1]:
            raise ValueError(f"size_range {self.size_range[0]}..{self.size_range[1]} is empty")


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
    algo: str = "native"  # the backend's own op, or a send/recv algorithm of stages/comm/algos.py (scope "algo")

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


def _sweep_resolved(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 1 -> 2: version 1 kept the resolved sweep, its sizes and pt2pt's direction in the op's name."""
    options = doc.get("comm_options")
    if not isinstance(options, dict):
        return doc
    sizes, ops = options.get("sizes") or [8], options.get("ops") or []
    if not isinstance(sizes, list) or not all(whole_number(s) and s > 0 for s in sizes):
        raise SchemaError("comm_options.sizes", "expected a list of sizes in bytes (whole numbers from 1)")
    if not isinstance(ops, list):
        raise SchemaError("comm_options.ops", "expected a list of op names")
    sizes, ops = sorted(sizes), [str(op) for op in ops]
    kept = {k: v for k, v in options.items() if k not in ("sizes", "fit_device_memory")}
    return {**doc, "comm_options": kept | {
        "min_bytes": sizes[0], "max_bytes": sizes[-1], "step_factor": sizes[1] / sizes[0] if len(sizes) > 1 else 2.0,
        "ops": [op.replace("pt2pt_bidir", "pt2pt") for op in ops], "bidirectional": "pt2pt_bidir" in ops}}


def _model_renamed(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 3 -> 4: the section version 3 called `model` is the cost model."""
    return {**{key: value for key, value in doc.items() if key != "model"}, "cost_model": doc.get("model")}


def _held_still(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 5 -> 6: a sweep before version 6 timed every call on the same buffers."""
    options = doc.get("comm_options")
    return {**doc, "comm_options": {"rotate": False, **options}} if isinstance(options, dict) else doc


def _pairs_counted(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 6 -> 7: run.json counts the pair rows (version 6 held them, and they are read from it)."""
    return {**doc, "pair_rows": len(doc["pairs"])} if isinstance(doc.get("pairs"), list) else doc


COMM_OPTIONS = Section("comm_options", CommOptions | None, upgrades={1: _sweep_resolved, 5: _held_still})
COMM = Section("comm", list[CommRow], list, csv=True)
# A fleet of thousands of nodes measures millions of pairs: pairs.csv holds them, run.json their count.
PAIRS = Section("pairs", list[PairRow], list, counted_as="pair_rows", upgrades={6: _pairs_counted})
COST_MODEL = Section("cost_model", CostModel | None, upgrades={3: _model_renamed})
