"""A fleet's topology: which leaf switch (rack) each node hangs from (docs/methodology.md §16).

Two forms are read. Slurm's topology.conf, one switch a line (`SwitchName=leaf1 Nodes=gpu[001-016]`;
a line with `Switches=` alone names a switch above others and places no node), and a plain list, one
`NODE SWITCH` a line (NODE may be a host list: `gpu[001-016] leaf1`). `#` at a line's start or after a
space starts a comment in both.
A node placed twice, a line of neither form, or a file that places no node is refused in one line.

Slurm's file describes the whole cluster, of which a job holds a part: nodes it places beyond the job
are fine. A plain list is written for the fleet at hand: a node it places that the job lacks is a typo,
and refused (check()). Either way, every node of the job must be placed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from clusterbench.errors import UsageError
from clusterbench.inputs import files, hostlist

MAX_NODES = hostlist.MAX_HOSTS  # as many as Slurm's host lists read: more is a typo in a host range, not a cluster
_SLURM_KEY = re.compile(r"(\w+)=(\S+)")
_COMMENT = re.compile(r"(^|\s)#.*")  # a `#` inside a name (a test's host#1) starts none


@dataclass(frozen=True)
class Topology:
    racks: dict[str, str]  # node -> its leaf switch
    slurm: bool  # Slurm's topology.conf (the whole cluster), not a list written for this fleet
    path: str

    def check(self, nodes: list[str]) -> None:
        """Refuse a topology that does not place every node of the job, or (a plain list) places others."""
        missing = [n for n in nodes if n not in self.racks]
        if missing:
            raise UsageError(f"--topology {self.path}: it places no switch above {_some(missing)} of this job")
        if not self.slurm:
            extra = sorted(set(self.racks) - set(nodes))
            if extra:
                raise UsageError(f"--topology {self.path}: it names {_some(extra)}, which this job does not have "
                                 "(a list for this fleet names its nodes only)")


def _some(names: list[str]) -> str:
    shown = ", ".join(names[:5])
    return f"{shown} and {len(names) - 5} more" if len(names) > 5 else shown


def read(path: Path) -> Topology:
    """The topology in `path`, either form."""
    text = files.read_text(path, "--topology")
    lines = [(i, _COMMENT.sub("", line).strip()) for i, line in enumerate(text.splitlines(), 1)]
    lines = [(i, line) for i, line in lines if line]
    slurm = any(re.match(r"(?i)switchname=", line) for _, line in lines)
    racks: dict[str, str] = {}
    where: dict[str, int] = {}
    for i, line in lines:
        switch, names = _slurm_line(line) if slurm else _plain_line(line)
        if switch is None and slurm:
            raise UsageError(f"--topology {path} line {i}: expected SwitchName=NAME with Nodes=HOSTS or Switches=NAMES "
                             "(Slurm's topology.conf)")
        if switch is None:
            raise UsageError(f"--topology {path} line {i}: expected a node (or host list) and its switch, as "
                             "`gpu[001-016] leaf1`")
        try:
            nodes = hostlist.expand(names) if names else []
        except ValueError as e:
            raise UsageError(f"--topology {path} line {i}: {e}") from None
        if len(racks) + len(nodes) > MAX_NODES:
            raise UsageError(f"--topology {path} line {i}: more than {MAX_NODES} nodes: a host range is mistyped")
        for node in nodes:
            if node in racks:
                raise UsageError(f"--topology {path} line {i}: node {node} is already under {racks[node]} "
                                 f"(line {where[node]}): a node hangs from one leaf switch")
            racks[node], where[node] = switch, i
    if not racks:
        raise UsageError(f"--topology {path}: it places no node under a switch")
    return Topology(racks, slurm, str(path))


def _slurm_line(line: str) -> tuple[str | None, str]:
    """A topology.conf line's switch and its nodes' host list ("" for a switch of switches)."""
    fields = {key.lower(): value for key, value in _SLURM_KEY.findall(line)}
    if "switchname" not in fields or _SLURM_KEY.sub("", line).strip():
        return None, ""
    if "nodes" not in fields and "switches" not in fields:
        return None, ""
    return fields["switchname"], fields.get("nodes", "")


def _plain_line(line: str) -> tuple[str | None, str]:
    parts = line.split()
    return (parts[1], parts[0]) if len(parts) == 2 else (None, "")
