"""run.json's `cost_model` section: the alpha-beta model fitted to a run's own sweep (docs/methodology.md §14)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from clusterbench.results.codec import AT_LEAST_ONE, MESSAGE_BYTES, NONNEGATIVE, POSITIVE, bounds

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
