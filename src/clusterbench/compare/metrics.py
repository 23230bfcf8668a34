"""A run.json flattened into named numbers, the common ground of compare, rules and baselines.

Names: comm.<op>.busbw_gbps.<small|medium|large|avg> (mean busbw over the sizes of a class;
avg is nccl-tests' mean over all sizes), comm.<op>.busbw_gbps@<bytes> per exact size,
comm.<op>.wrong, train.<summary figure>, train.alignment.<figure>, peaks.matmul.<dtype>.tflops
and peaks.copy.gbps. busbw is in Gbps (bits), as run.json stores it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

SMALL_MAX_BYTES = 64 * 1024  # below: latency-bound sizes
MEDIUM_MAX_BYTES = 16 * 1024**2  # from here on: bandwidth-bound sizes
SIZE_CLASSES = ("small", "medium", "large")
_TRAIN_FIGURES = ("tgs", "padded_tgs", "tflops_per_device", "mfu", "hfu", "peak_memory_bytes")
_ALIGNMENT_FIGURES = ("mre", "variance", "max_abs_dev", "first_step_error")


@dataclass(frozen=True)
class Kind:
    """Which way is better for metrics whose name matches `pattern`, and what change is noise."""

    pattern: str
    better: str | None  # "higher", "lower", or None: shown, never judged by default
    floor: float = 0.0  # a worsening smaller than this (absolute) is not a failure


# First match wins. The alignment floors are a tenth of REFERENCE.md §5's limits (MRE 0.02,
# first step 0.5 %): two runs both well inside the limit must not fail on a relative change
# of tiny numbers. Variance and max |d| scale with the reference's own noise, so compare
# only shows them; alignment.pass (the run's own verdict) and rules judge them.
KINDS: tuple[Kind, ...] = (
    Kind(r"comm\..*\.wrong", "lower"),
    Kind(r"comm\..*\.busbw_gbps.*", "higher"),
    Kind(r"train\.alignment\.pass", "higher"),
    Kind(r"train\.alignment\.mre", "lower", floor=0.002),
    Kind(r"train\.alignment\.first_step_error", "lower", floor=0.0005),
    Kind(r"train\.alignment\..*", None),
    Kind(r"train\.peak_memory_bytes", "lower"),
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


def is_per_size(name: str) -> bool:
    return "@" in name


def flatten(doc: dict[str, Any]) -> dict[str, float]:
    """Every metric this run.json holds, by name."""
    metrics = _comm(doc.get("comm") or [])
    metrics.update(_train(doc.get("train") or {}))
    metrics.update(_peaks(doc.get("peaks") or {}))
    return metrics


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _comm(rows: list[dict[str, Any]]) -> dict[str, float]:
    by_op: dict[str, dict[int, list[float]]] = {}
    wrong: dict[str, int] = {}
    for row in rows:
        op = row["op"]
        wrong[op] = wrong.get(op, 0) + row.get("wrong", 0)
        if row.get("world_size", 2) > 1:  # one rank has no bus bandwidth (REFERENCE.md §1)
            by_op.setdefault(op, {}).setdefault(row["size_bytes"], []).append(row["busbw_gbps"])
    out: dict[str, float] = {f"comm.{op}.wrong": float(n) for op, n in wrong.items()}
    for op, sizes in by_op.items():
        per_size = {size: _mean(values) for size, values in sorted(sizes.items())}
        out[f"comm.{op}.busbw_gbps.avg"] = _mean(list(per_size.values()))
        for cls in SIZE_CLASSES:
            values = [v for size, v in per_size.items() if size_class(size) == cls]
            if values:
                out[f"comm.{op}.busbw_gbps.{cls}"] = _mean(values)
        out.update({f"comm.{op}.busbw_gbps@{size}": v for size, v in per_size.items()})
    return out


def _train(train: dict[str, Any]) -> dict[str, float]:
    summary = train.get("summary") or {}
    out = {f"train.{k}": float(summary[k]) for k in _TRAIN_FIGURES if summary.get(k) is not None}
    align = train.get("alignment")
    if align:
        out.update({f"train.alignment.{k}": float(align[k]) for k in _ALIGNMENT_FIGURES if align.get(k) is not None})
        out["train.alignment.pass"] = 1.0 if align.get("verdict") == "PASS" else 0.0
    return out


def _peaks(peaks: dict[str, Any]) -> dict[str, float]:
    # The slowest device gates the whole job, so a peak across devices is their minimum.
    out: dict[str, float] = {}
    for m in peaks.get("matmul") or []:
        name = f"peaks.matmul.{m['dtype']}.tflops"
        out[name] = min(out.get(name, m["tflops"]), m["tflops"])
    copies = [c["gbps"] for c in peaks.get("copy") or []]
    if copies:
        out["peaks.copy.gbps"] = min(copies)
    return out
