"""run.json's `cost_model` section: the alpha-beta model fitted to a run's own sweep (docs/methodology.md §14)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

LinkName = Literal["intra", "inter"]


@dataclass(frozen=True)
class OpFit:
    """t(S) = alpha + beta * S fitted to one op's rows on one link class."""

    op: str
    link: LinkName
    world_size: int  # the ranks of the fitted rows
    alpha_us: float
    beta_us_per_byte: float
    bandwidth_gb_s: float | None  # the link's GB/s (bytes) the op's bus traffic implies: busbw factor / beta
    r2: float  # on log time, so that small and large sizes both count
    points: int


@dataclass(frozen=True)
class LinkParams:
    """One link class as the ring's steps and bytes see it: per step latency and one-direction bandwidth."""

    link: LinkName
    alpha_us: float
    bandwidth_gb_s: float
    source: str  # the fit it was derived from, e.g. "all_reduce on 2 ranks"


@dataclass(frozen=True)
class Validation:
    """Fit on every other size, predict the sizes between: the model's error on sizes it has not seen."""

    op: str
    link: LinkName
    median_error: float  # relative: |predicted - measured| / measured
    max_error: float
    points: int  # the sizes predicted


@dataclass
class CostModel:
    stat: Literal["p50", "mean", "min"]  # which time of each row was fitted
    fits: list[OpFit] = field(default_factory=list)
    links: list[LinkParams] = field(default_factory=list)
    validation: list[Validation] = field(default_factory=list)
    size_range: tuple[int, int] | None = None  # the sizes fitted (bytes, both included); None: all of them
