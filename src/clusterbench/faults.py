"""Test-only fault injection, so the tests can prove faults are caught without mocking anything.

Set through environment variables that no user sets:
  CLUSTERBENCH_TEST_FAULT="kill:RANK:STEP" or "hang:RANK:STEP": that rank dies (SIGKILL) or
      stops responding when it reaches step STEP (1-based) of its sweep.
  CLUSTERBENCH_TEST_CORRUPT="OP:RANK": that rank's checked output of OP gets one wrong element.
  CLUSTERBENCH_TEST_NAN_STEP="STEP": rank 0's training loss becomes NaN at optimizer step STEP (1-based).
  CLUSTERBENCH_TEST_SDC="RANK:STEP": that rank's numerics task drifts slightly from step STEP (1-based) on,
      as a device that silently computes wrong numbers would.
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
