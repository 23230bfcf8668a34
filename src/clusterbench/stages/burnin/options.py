"""What a burn-in may be asked (docs/burnin.md), each option declared once: how long (a level, or a duration),
in windows of how long, how much memory each device's test covers, what fall of a figure is a drift, and which
node rules judge the counters. No torch: every parser reads it."""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass
from pathlib import Path

from clusterbench import argtypes
from clusterbench.argtypes import clipped, option
from clusterbench.nodechecks.table import NODE_RULES_HELP

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


def _minutes(seconds: float) -> str:
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds / 60:g} min"


@dataclass(frozen=True)
class BurninOptions:
    duration: float | None = option(None, "--duration", type=duration, shown="",
                                    help="how long to soak: seconds, or a number with s, m, h or d (90, 10m, 2h; at "
                                         "most 7 days); instead of --level")
    level: str | None = option(None, "--level", choices=tuple(LEVELS), shown=DEFAULT_LEVEL,
                               help="how long to soak, after DCGM's levels: "
                                    + ", ".join(f"{name} {_minutes(s)}" for name, s in LEVELS.items()))
    window: float | None = option(None, "--window", type=argtypes.real(MIN_WINDOW_S, strict=False, maximum=3600.0),
                                  metavar="SECONDS", help="seconds each window of figures spans",
                                  shown=f"the duration / {WINDOWS}, within {WINDOW_S[0]:g} to {WINDOW_S[1]:g}")
    memory_bytes: int | None = option(None, "--memory-bytes", type=argtypes.size,
                                      help="the memory test's region per device",
                                      shown="about 80%% of a GPU's free memory; on a CPU 256M, or an eighth of the "
                                            "memory available shared by the host's ranks, if less")
    tolerance: float = option(0.1, "--tolerance", type=argtypes.real(0.0, maximum=1.0),
                              help="a figure drifts when it falls by more than this share and stays down")
    node_rules: Path | None = option(None, "--node-rules", type=Path, metavar="FILE", help=NODE_RULES_HELP,
                                     shown="the shipped node_rules.yaml")
    in_run: bool = False  # `run` sets it: there the soak runs only when one of its options is given
