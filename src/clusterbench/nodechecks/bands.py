"""What a healthy node of a class measures, learned from the fleet itself, and which nodes fall out
of it (docs/methodology.md §16).

A band is the median of a metric over the nodes of one hardware class and a robust spread
(1.4826 x the median absolute deviation, which is the standard deviation for normal noise and
ignores a few wild values). It is learned by iterative exclusion, as SuperBench learns its
baselines: nodes outside the band are set aside and the band learned again from the rest, until
no node falls out. A node is out when it is worse than the median by more than `tolerance` x
the median, and either by more than SPREADS x the spread or below HALF of the median. The
tolerance keeps a fleet whose nodes all measure the same (a zero spread) from condemning a node
0.1 % off; the spread keeps a noisy fleet's noise from condemning; and a node at half its class's
pace is out of any fleet, however noisy (its second measurement, alone, then decides).
"""

from __future__ import annotations

import statistics

from clusterbench.nodechecks.table import BANDED
from clusterbench.results.documents import Band

SPREADS = 4.0
HALF = 0.5
MAD_TO_SIGMA = 1.4826
ROUNDS = 10  # iterations of the exclusion; it settles in two or three
# A band of fewer nodes judges nobody: with two, the median is their mean and each is as far from it as the other.
JUDGES_FROM = 3


def node_class(device: str, gpus: int, cores: int | None) -> str:
    """The hardware class a node is judged within: its GPUs' model and count, or its CPU and cores."""
    return f"{device} x{gpus}" if gpus else f"{device} ({cores} cores)"


def out_of(band: Band, value: float, tolerance: float) -> bool:
    """Whether `value` is worse (lower) than the band allows."""
    short = band.median - value
    return short > tolerance * band.median and (short > SPREADS * band.spread or value < HALF * band.median)


def learn(klass: str, metric: str, values: dict[str, float], tolerance: float) -> Band:
    """The band of `metric` in `klass` from each node's value."""
    kept = dict(values)
    band = _band(klass, metric, kept)
    for _ in range(ROUNDS):
        outside = [n for n, v in kept.items() if out_of(band, v, tolerance)]
        if not outside or len(outside) == len(kept):
            break
        for n in outside:
            del kept[n]
        band = _band(klass, metric, kept)
    return band


def _band(klass: str, metric: str, values: dict[str, float]) -> Band:
    median = statistics.median(values.values())
    mad = statistics.median(abs(v - median) for v in values.values())
    return Band(klass, metric, median, MAD_TO_SIGMA * mad, len(values))


def learn_all(probes: dict[str, tuple[str, dict[str, float]]], tolerance: float) -> list[Band]:
    """Every band of every class, from node -> (class, metrics)."""
    by_class: dict[tuple[str, str], dict[str, float]] = {}
    for node, (klass, metrics) in probes.items():
        for metric, value in metrics.items():
            by_class.setdefault((klass, metric), {})[node] = value
    return [learn(klass, metric, values, tolerance) for (klass, metric), values in sorted(by_class.items())]


def outliers(probes: dict[str, tuple[str, dict[str, float]]], bands: list[Band], tolerance: float,
             least: int = JUDGES_FROM) -> dict[str, list[str]]:
    """node -> the metrics it falls out of; a band of fewer than `least` nodes judges nobody."""
    found: dict[str, list[str]] = {}
    index = {(b.klass, b.metric): b for b in bands}
    for node, (klass, metrics) in probes.items():
        for metric, value in metrics.items():
            band = index.get((klass, metric))
            if band is not None and band.nodes >= least and out_of(band, value, tolerance):
                found.setdefault(node, []).append(metric)
    return found


def reason(metric: str, value: float, band: Band) -> str:
    ratio = value / band.median if band.median else 0.0
    return (f"{BANDED.get(metric, metric)} {value:.3g}, {ratio:.2f}x the median {band.median:.3g} of "
            f"{band.nodes} {band.klass} nodes ({band.source})")
