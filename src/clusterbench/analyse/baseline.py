"""A baseline: each metric's mean, min, max and count over several runs (docs/methodology.md §6)."""

from __future__ import annotations

from pathlib import Path

from clusterbench.analyse.metrics import flatten
from clusterbench.errors import UsageError
from clusterbench.results import documents
from clusterbench.results.documents import Baseline, MetricStats
from clusterbench.results.folder import load_run


def build(run_dirs: list[str | Path]) -> Baseline:
    """Summarise the runs' metrics; a metric counts only the runs that have it."""
    if not run_dirs:
        raise UsageError("baseline needs at least one run folder")
    values: dict[str, list[float]] = {}
    for run_dir in run_dirs:
        for name, value in flatten(load_run(run_dir)).items():
            values.setdefault(name, []).append(value)
    return Baseline(
        created_utc=documents.utc_stamp(),
        runs=[str(r) for r in run_dirs],
        metrics={name: MetricStats(sum(v) / len(v), min(v), max(v), len(v)) for name, v in sorted(values.items())},
    )


def write(baseline: Baseline, path: str | Path) -> Path:
    return documents.write(Path(path), baseline, "baseline")


def load_means(path: str | Path) -> dict[str, float]:
    """The mean of each metric in a baseline file, which compare and rules use as reference."""
    p = Path(path)
    baseline = documents.read(p, documents.BASELINE, f"baseline {p}")
    return {name: m.mean for name, m in baseline.metrics.items()}
