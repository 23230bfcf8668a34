"""A baseline: each metric's mean, min, max and count over several runs, kept as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clusterbench.compare.metrics import flatten
from clusterbench.errors import UsageError
from clusterbench.results import SCHEMA_VERSION, atomic_write, load_run, read_json, utc_stamp

KIND = "clusterbench-baseline"


def build(run_dirs: list[str | Path]) -> dict[str, Any]:
    """Summarise the runs' metrics; a metric counts only the runs that have it."""
    if not run_dirs:
        raise UsageError("baseline needs at least one run folder")
    values: dict[str, list[float]] = {}
    for run_dir in run_dirs:
        for name, value in flatten(load_run(run_dir)).items():
            values.setdefault(name, []).append(value)
    return {
        "kind": KIND,
        "schema_version": SCHEMA_VERSION,
        "created_utc": utc_stamp(),
        "runs": [str(r) for r in run_dirs],
        "metrics": {
            name: {"mean": sum(v) / len(v), "min": min(v), "max": max(v), "count": len(v)}
            for name, v in sorted(values.items())
        },
    }


def write(baseline: dict[str, Any], path: str | Path) -> Path:
    p = Path(path)
    try:
        atomic_write(p, json.dumps(baseline, indent=1) + "\n")
    except OSError as e:
        raise UsageError(f"cannot write {p}: {e.strerror or e}") from None
    return p


def load_means(path: str | Path) -> dict[str, float]:
    """The mean of each metric in a baseline file, which compare and rules use as reference."""
    p = Path(path)
    doc = read_json(p, f"baseline {p}")
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise UsageError(f"{p} is not a clusterbench baseline (make one with clusterbench baseline)")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise UsageError(f"baseline {p} has schema version {doc.get('schema_version')}; "
                         f"this clusterbench reads version {SCHEMA_VERSION}")
    return {name: float(m["mean"]) for name, m in doc["metrics"].items()}
