"""Test-only fault injection, so the tests can prove faults are caught without mocking anything.

Set through environment variables that no user sets:
  CLUSTERBENCH_TEST_FAULT="kill:RANK:STEP" or "hang:RANK:STEP": that rank dies (SIGKILL) or
      stops responding when it reaches step STEP (1-based) of its sweep.
  CLUSTERBENCH_TEST_CORRUPT="OP:RANK": that rank's checked output of OP gets one wrong element.
  CLUSTERBENCH_TEST_NAN_STEP="STEP": rank 0's training loss becomes NaN at optimizer step STEP (1-based).
  CLUSTERBENCH_TEST_SDC="RANK:STEP": that rank's numerics task drifts slightly from step STEP (1-based) on,
      as a device that silently computes wrong numbers would.
  CLUSTERBENCH_TEST_FLIP="RANK:SECOND": at that second of a burn-in (seconds since its soak began), one word
      of that rank's memory-test region is flipped after it was written, as a failing memory cell would.
  CLUSTERBENCH_TEST_SLOW="RANK:SECOND:FACTOR": from that second of a burn-in on, that rank's matmul takes
      FACTOR times as long (the difference slept inside the timed region), as a throttling device would.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

FAULT_ENV = "CLUSTERBENCH_TEST_FAULT"
CORRUPT_ENV = "CLUSTERBENCH_TEST_CORRUPT"
NAN_STEP_ENV = "CLUSTERBENCH_TEST_NAN_STEP"
SDC_ENV = "CLUSTERBENCH_TEST_SDC"
FLIP_ENV = "CLUSTERBENCH_TEST_FLIP"
SLOW_ENV = "CLUSTERBENCH_TEST_SLOW"
# The drift: a relative change in the loss small enough to pass every tolerance but a bitwise one.
SDC_DRIFT = 2.0**-20


def at_step(rank: int, step: int) -> None:
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    kind, fault_rank, fault_step = spec.split(":")
    if int(fault_rank) != rank or int(fault_step) != step:
        return
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "hang":
        time.sleep(3600)


def corrupt(op: str, rank: int, out: Any) -> None:
    """One wrong element in the output tensor `out`, where the test asked for it."""
    if os.environ.get(CORRUPT_ENV) == f"{op}:{rank}":
        out.view(-1)[0] += 1


def poisoned(step: int, rank: int) -> bool:
    """Whether this rank's loss of this optimizer step is to become NaN."""
    return rank == 0 and os.environ.get(NAN_STEP_ENV) == str(step)


def drift(rank: int, step: int) -> float:
    """The factor this rank's numerics-task loss of this step (1-based) is scaled by: 1, unless the
    test asked this rank to drift from an earlier or this step on."""
    spec = os.environ.get(SDC_ENV)
    if not spec:
        return 1.0
    drift_rank, drift_step = spec.split(":")
    return 1.0 + SDC_DRIFT if int(drift_rank) == rank and step >= int(drift_step) else 1.0


def flip_second(rank: int) -> float | None:
    """The second of the soak at which this rank's memory test is to read one word back flipped; None: never."""
    spec = os.environ.get(FLIP_ENV)
    if not spec:
        return None
    flip_rank, second = spec.split(":")
    return float(second) if int(flip_rank) == rank else None


def slowdown(rank: int, t_s: float) -> float:
    """How many times as long this rank's matmul is to take at second t_s of the soak: 1, unless the test asked
    this rank to slow down from an earlier second on."""
    spec = os.environ.get(SLOW_ENV)
    if not spec:
        return 1.0
    slow_rank, second, factor = spec.split(":")
    return float(factor) if int(slow_rank) == rank and t_s >= float(second) else 1.0
