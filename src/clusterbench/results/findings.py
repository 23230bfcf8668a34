"""What a node check, the fleet or a burn-in found wrong with a node, as every record keeps it: the subject,
the finding in one line, how grave it is, and the action it calls for (docs/methodology.md §20)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["critical", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    """Something found wrong, with what to do about it."""

    subject: str  # the device, port or node: "cpu", "cuda:0", "eth0", "node"
    what: str  # one line: "throughput fell 38 % from 12.0 s on", "2 link flaps on eth0"
    severity: Severity
    action: str  # a recommended action in words: "reset the GPU", "check the cable", "drain and RMA"
    metric: str = ""  # the figure it counts toward, which a rule judges: "counters.link_flaps"; "": none
    node: str = ""  # the node it is of, which a fleet excludes for it; "": of no one node (the job's all_reduce)
