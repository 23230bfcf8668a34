"""What the store keeps of one run: its identity and ending, and every figure with the node, device
and hardware class that measured it. Built from a run folder (clusterbench.publish.recording) or by a
command that keeps no folder (`check`); free of any database library."""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass, field

NODE_PREFIX = "node."  # a fleet's figures of each node, as the store names them: node.matmul_tflops


@dataclass(frozen=True)
class Figure:
    node: str
    device: str  # "" for a figure of the node (or of the whole job) rather than of one device
    metric: str
    value: float
    klass: str  # the hardware class it is compared within (nodechecks.bands.node_class)


@dataclass(frozen=True)
class NodeResult:
    """A node judged on its own within a run (a fleet's row): its hardware class, its figures and its verdict."""

    node: str
    klass: str
    figures: dict[str, float]
    verdict: str


@dataclass(frozen=True)
class RunRecord:
    uid: str  # the same run always has the same uid: importing it twice records it once
    command: str
    started_utc: str
    finished_utc: str | None
    status: str
    verdict: str | None
    host: str
    folder: str | None
    figures: list[Figure]
    node_verdicts: dict[str, str]  # node -> PASS / SUSPECT / EXCLUDE / FAIL (its own, or the run's)
    reason: str | None = None  # why it failed, in one line
    node_classes: dict[str, str] = field(default_factory=dict)  # node -> class, for nodes with no figures


def started_s(stamp: str) -> float:
    """A run folder's UTC stamp (20261202T061500Z) as seconds since the epoch."""
    return float(calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ")))
