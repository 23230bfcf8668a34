"""What a burn-in is asked to do, decided before any rank starts: how long, in windows of how long, how much memory
each device's test covers, and what fall of a figure is a drift (docs/burnin.md). No torch: the stage reads it."""

from __future__ import annotations

from dataclasses import dataclass

from clusterbench.analyse.rules import Rule
from clusterbench.errors import UsageError
from clusterbench.stages.burnin.options import (
    DEFAULT_LEVEL,
    LEVELS,
    MIN_MEMORY_BYTES,
    WINDOW_S,
    WINDOWS,
    BurninOptions,
)
from clusterbench.units import human_bytes


@dataclass(frozen=True)
class BurninPlan:
    duration_s: float
    window_s: float  # the windows tile the duration exactly
    windows: int
    level: str | None
    memory_bytes: int | None
    tolerance: float
    rules: tuple[Rule, ...] = ()  # the node rules the counters are judged by (stages/burnin/stage.py loads them)


def plan_of(opts: BurninOptions, available_bytes: int | None, local_ranks: int) -> BurninPlan:
    """The soak the options ask for, or a UsageError saying why it cannot be; `available_bytes`: the host memory
    the ranks of this host may share on a CPU (None: not checked here, a GPU rank checks its own)."""
    if opts.duration is not None and opts.level is not None:
        raise UsageError("--duration and --level both say how long to soak: give one")
    level = None if opts.duration is not None else (opts.level or DEFAULT_LEVEL)
    seconds = opts.duration if opts.duration is not None else LEVELS[level]
    window = opts.window if opts.window is not None else min(max(seconds / WINDOWS, WINDOW_S[0]), WINDOW_S[1])
    if window > seconds:
        raise UsageError(f"--window {window:g} is longer than the soak ({seconds:g} s): give a shorter window")
    if opts.memory_bytes is not None:
        if opts.memory_bytes < MIN_MEMORY_BYTES:
            raise UsageError(f"--memory-bytes {opts.memory_bytes}: the memory test needs at least "
                             f"{human_bytes(MIN_MEMORY_BYTES)}")
        if available_bytes is not None and opts.memory_bytes * local_ranks > available_bytes:
            raise UsageError(f"--memory-bytes {human_bytes(opts.memory_bytes)} for each of {local_ranks} ranks: this "
                             f"host has {human_bytes(available_bytes)} of memory available")
    windows = max(1, round(seconds / window))
    return BurninPlan(seconds, seconds / windows, windows, level, opts.memory_bytes, opts.tolerance)
