"""A baseline: each metric's mean, min, max and count over several runs (docs/methodology.md §6)."""

from __future__ import annotations

from pathlib import Path

from clusterbench.errors import UsageError
from clusterbench.results import documents
from clusterbench.results.documents import Baseline, MetricStats


def build(runs: list[tuple[str, dict[str, float]]]) -> Baseline:
    """Summarise the runs' metrics (each run folder with its metrics); a metric counts only the runs that have it."""
    if not runs:
        raise UsageError("baseline needs at least one run folder")
    values: dict[str, list[float]] = {}
    for _, figures in runs:
        for name, value in figures.items():
            values.setdefault(name, []).append(value)
    return Baseline(
        created_utc=documents.utc_stamp(),
        runs=[folder for folder, _ in runs],
        metrics={name: MetricStats(sum(v) / len(v), min(v), max(v), len(v)) for name, v in sorted(values.items())},
    )


def write(baseline: Baseline, path: str | Path) -> Path:
    return documents.write(Path(path), baseline, "baseline")


def load_means(path: str | Path) -> dict[str, float]:
    """The mean of each metric in a baseline file, which compare and rules use as reference."""
    p = Path(path)
    baseline = documents.read(p, documents.BASELINE, f"baseline {p}")
    return {name: m.mean for name, m in baseline.metrics.items()}
