"""A baseline: each metric's mean, min, max and count over several runs (docs/methodology.md §6)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from clusterbench.errors import UsageError
from clusterbench.results import documents
from clusterbench.results.documents import Band, Baseline, MetricStats
from clusterbench.results.run import Run
from clusterbench.stages.fleet.records import FLEET


def build(runs: list[tuple[str, dict[str, float]]]) -> Baseline:
    """Summarise the runs' metrics (each run folder with its metrics); a metric counts only the runs that have it."""
    if not runs:
        raise UsageError("baseline needs at least one run folder")
    values: dict[str, list[float]] = {}
    for folder, figures in runs:
        if not figures:  # a baseline is never of nothing, nor counts a run it has no figure of
            raise UsageError(f"baseline: {folder} holds no measured figure to base on (an info run, or one that "
                             "measured nothing): leave it out")
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


def bands_of(path: Path, label: str, load_run: Callable[[Path], Run]) -> list[Band]:
    """The node bands an earlier fleet run (its folder or run.json) or a baseline from the store holds."""
    if path.is_file() and path.name != "run.json":
        doc = documents.read(path, documents.BASELINE, f"{label} {path}")
        if not doc.bands:
            raise UsageError(f"{label} {path}: that baseline holds no node bands (make one with clusterbench "
                             "baseline --from-store, from a store that recorded fleet runs)")
        return [replace(b, source=f"baseline {path} ({b.source})") for b in doc.bands]
    run = load_run(path)
    if FLEET.of(run) is None or not FLEET.of(run).bands:
        raise UsageError(f"{label} {path}: that run holds no fleet bands (make one with clusterbench fleet)")
    return [replace(b, source=f"baseline {path}") for b in FLEET.of(run).bands]
