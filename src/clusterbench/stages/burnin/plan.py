"""What a burn-in is asked to do, decided before any rank starts: how long, in windows of how long, how much memory
each device's test covers, and what fall of a figure is a drift (docs/burnin.md). No torch: the stage reads it."""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass
from pathlib import Path

from clusterbench.analyse.rules import Rule
from clusterbench.argtypes import clipped
from clusterbench.errors import UsageError
from clusterbench.units import human_bytes

# How long each --level soaks, after DCGM's diagnostic levels (a smoke test to an overnight soak).
LEVELS: dict[str, float] = {"quick": 120.0, "medium": 900.0, "long": 3600.0, "extended": 8 * 3600.0}
DEFAULT_LEVEL = "quick"
MAX_DURATION_S = 7 * 86400.0
# The default window: the soak in WINDOWS of them, within WINDOW_S, so a quick soak still has the windows a step
# needs on each side and an overnight one no more rows than it can use.
WINDOWS = 60
WINDOW_S = (1.0, 30.0)
MIN_WINDOW_S = 0.1  # every window runs a matmul, a memory pass, an all_reduce and a gather: less cannot hold them
MIN_MEMORY_BYTES = 4096
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(text: str) -> float:
    """'90', '90s', '10m', '2h', '1d' -> seconds, more than 0 and at most a week."""
    match = _DURATION.match(text)
    try:  # a plain number too (-5, 1e9), so that a number out of range is told so
        seconds = float(match.group(1)) * _UNITS[match.group(2)] if match else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"cannot read {clipped(text)!r} as a duration: give seconds, or a number "
                                         "with s, m, h or d, like 90, 10m or 2h") from None
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_DURATION_S):
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 7 days ({MAX_DURATION_S:g} s), "
                                         f"got {clipped(text)!r}")
    return seconds


@dataclass(frozen=True)
class BurninOptions:
    duration: float | None = None  # seconds; None: the --level's
    level: str | None = None  # None: --duration's, else quick
    window: float | None = None  # seconds; None: the duration / WINDOWS, within WINDOW_S
    memory_bytes: int | None = None  # per device; None: each rank's default for its device (burnin/memory.py)
    tolerance: float = 0.1  # a figure that falls by more than this share of its level drifts
    node_rules: Path | None = None  # how the nodes' counters over the soak are judged; None: the shipped node rules
    in_run: bool = False  # `run` sets it: there the soak runs only when one of its options is given


@dataclass(frozen=True)
class BurninPlan:
    duration_s: float
    window_s: float  # the windows tile the duration exactly
    windows: int
    level: str | None
    memory_bytes: int | None
    tolerance: float
    rules: tuple[Rule, ...] = ()  # the node rules the counters are judged by (stages/burnin.py loads them)


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
