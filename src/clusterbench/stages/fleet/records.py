"""A fleet's qualification as run.json keeps it (docs/methodology.md §16): what each node measured
of itself, the retests of its links, the numerics vote, the facts the nodes must agree on, and the
conclusion: every node a row, the fleet's bands it was judged by, the nodes to take out and why.

The measured parts are written as the ranks produce them; the conclusion (rows, bands, verdicts,
exclusions) is worked out from them once the ranks end, so a run cut short by a dead node is still
judged on what it measured.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from clusterbench.results.codec import NONNEGATIVE, TICKS_US, bounds
from clusterbench.results.documents import Band
from clusterbench.results.findings import Finding
from clusterbench.results.run import Section

NodeVerdict = Literal["PASS", "SUSPECT", "EXCLUDE"]


@dataclass(frozen=True)
class CopyFigure:
    """A copy's GB/s over its batches (host to device, device to host, or between two GPUs): the best batch (the
    figure the bands judge: a copy is only ever slowed by others), the median and the worst, against what its link
    can reach by the link table (docs/methodology.md §2) where NVML tells the link."""

    subject: str  # the device, "cuda:0", or the pair, "cuda:0 -> cuda:3"
    metric: str  # the figure it gives: h2d_gbps, d2h_gbps, p2p_min_gbps
    gbps: float = field(metadata=NONNEGATIVE)
    median_gbps: float = field(metadata=NONNEGATIVE)
    worst_gbps: float = field(metadata=NONNEGATIVE)
    batches: int = field(metadata=NONNEGATIVE)
    theoretical_gbps: float | None = field(default=None, metadata=NONNEGATIVE)
    link: str = ""  # the link in words: "PCIe gen5 x16", "NVLink 4 x18"

    @property
    def share(self) -> float | None:
        """The best batch's share of the link's theoretical figure."""
        return self.gbps / self.theoretical_gbps if self.theoretical_gbps else None

    def text(self) -> str:
        """"52.1 GB/s (median 51.8, worst 50.9 over 12 batches), 0.83 of PCIe gen5 x16's 63"."""
        line = (f"{self.gbps:.3g} GB/s (median {self.median_gbps:.3g}, worst {self.worst_gbps:.3g} over "
                f"{self.batches} batches)")
        share = self.share
        return line + (f", {share:.2f} of {self.link}'s {self.theoretical_gbps:.3g}" if share is not None else "")


@dataclass(frozen=True)
class NodeProbe:
    """One node's own facts and figures, from its first rank (and each of its devices). Its hardware picture
    stays on the node (run.json holds rank 0's): a fleet's would make run.json 31 KB a node bigger."""

    node: str
    ranks: list[int] = field(metadata=NONNEGATIVE)
    facts: dict[str, str]  # what the fleet's nodes must agree on: driver, kernel, GPU count, ... (§16)
    klass: str  # the hardware class it is judged within: its devices' model and count
    metrics: dict[str, float] = field(metadata=NONNEGATIVE)  # the node checks' figures the bands judge
    counts: dict[str, float] = field(default_factory=dict, metadata=NONNEGATIVE)  # counters the node rules judge
    findings: list[Finding] = field(default_factory=list)  # what the counters found, with actions
    copies: list[CopyFigure] = field(default_factory=list)  # the copy figures the bands judge, their worst device's


@dataclass(frozen=True)
class Numerics:
    """One device's losses of the deterministic numerics task, step by step, as exact floats."""

    rank: int = field(metadata=NONNEGATIVE)
    node: str
    device: str
    losses: list[float]


@dataclass(frozen=True)
class Retest:
    """One way of a pair measured again after the rounds found it or one of its nodes slow: its fastest message."""

    src_node: str
    dst_node: str
    gbps: float = field(metadata=NONNEGATIVE)
    latency_us: float = field(metadata=TICKS_US)
    first_gbps: float | None = field(default=None, metadata=NONNEGATIVE)  # in the rounds; None: not slow there
    slow: bool = False  # below the fleet's bar now too
    why: str = ""  # why it was retested: a slow pair, or a suspect node against a healthy partner
    suspect: str = ""  # the suspect whose healthy partner the other node is; "" for a link retested for itself


@dataclass(frozen=True)
class Coverage:
    """Which pairs of nodes the rounds measured: every pair, or each node against `partners` others drawn from
    `seed` (docs/methodology.md §16)."""

    mode: Literal["all", "sampled"]
    partners: int = field(metadata=NONNEGATIVE)  # distinct partners per node the rounds give (n - 1: every pair)
    rounds: int = field(metadata=NONNEGATIVE)
    pairs: int = field(metadata=NONNEGATIVE)  # pairs of nodes measured, each both ways
    possible: int = field(metadata=NONNEGATIVE)  # pairs of nodes the fleet has
    seed: int | None = None  # sampled: what drew the pairings, to draw them again
    inside: int = field(default=0, metadata=NONNEGATIVE)  # with a topology: the rounds inside racks

    def summary(self) -> str:
        """What the rounds cover, in words: every pair, or the partners, the share of pairs, and what that finds."""
        if self.mode == "all":
            return f"every pair, {self.rounds} rounds of disjoint pairs"
        share = 100 * self.pairs / self.possible if self.possible else 100.0
        inside = f", {self.inside} of them inside the racks" if self.inside else ""
        return (f"sampled: each node against {self.partners} partners at least (seed {self.seed}) in {self.rounds} "
                f"rounds of disjoint pairs{inside}, {self.pairs} of {self.possible} pairs ({share:.2g} %): a node's "
                f"own fault shows in all its pairs, a bad link between two healthy nodes only where it is drawn "
                f"({share:.2g} % of them)")


@dataclass(frozen=True)
class NodeRow:
    node: str
    klass: str
    metrics: dict[str, float]
    verdict: NodeVerdict
    reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class OddFact:
    fact: str
    nodes: list[str]
    values: list[str]  # each odd node's value
    majority: str
    majority_nodes: int = field(metadata=bounds(1))


@dataclass(frozen=True)
class Divergence:
    """A device whose numerics-task losses left its class's majority, bit for bit."""

    node: str
    rank: int = field(metadata=NONNEGATIVE)
    device: str
    step: int = field(metadata=bounds(1))  # the first step that differs (1-based)
    loss: float
    majority_loss: float
    majority: int = field(metadata=bounds(1))  # how many devices hold the majority's loss
    voters: int = field(metadata=bounds(1))  # how many voted at that step


@dataclass(frozen=True)
class GroupFigure:
    """An all_reduce among some nodes (one rank each): the fleet's whole, or a part the search measured."""

    nodes: list[str]
    busbw_gbps: float = field(metadata=NONNEGATIVE)


@dataclass(frozen=True)
class Exclusion:
    node: str
    reasons: list[str]


@dataclass
class Fleet:
    probes: list[NodeProbe] = field(default_factory=list)
    numerics: list[Numerics] = field(default_factory=list)
    retests: list[Retest] = field(default_factory=list)
    # node -> its metrics measured again, alone, after they fell out of the fleet's band the first time
    rechecks: dict[str, dict[str, float]] = field(default_factory=dict)
    pair_bar: float = field(default=0.5, metadata=NONNEGATIVE)  # a pair is slow below this x the pairs' median
    tolerance: float = field(default=0.1, metadata=NONNEGATIVE)  # a node's own metric: how far below the median
    note: str | None = None  # what the fleet could not do (vote with 2 nodes)
    seconds: dict[str, float] = field(default_factory=dict, metadata=NONNEGATIVE)  # each phase's, on rank 0
    whole: GroupFigure | None = None  # --global: the all_reduce across every node, one rank each
    search: list[GroupFigure] = field(default_factory=list)  # the parts measured to find what slows it
    isolated: list[str] = field(default_factory=list)  # the smallest set of nodes the search found slow
    coverage: Coverage | None = None  # which pairs the rounds measured
    racks: dict[str, str] = field(default_factory=dict)  # with --topology: node -> its leaf switch (rack)
    # The conclusion, after the ranks:
    nodes: list[NodeRow] = field(default_factory=list)
    bands: list[Band] = field(default_factory=list)
    odd_facts: list[OddFact] = field(default_factory=list)
    divergences: list[Divergence] = field(default_factory=list)
    flaky: list[str] = field(default_factory=list)  # pairs slow once and normal on retest
    bad_links: list[str] = field(default_factory=list)  # pairs slow twice through a fault of their own
    bad_switches: list[str] = field(default_factory=list)  # a fault the nodes of one rack share, named as its switch
    excluded: list[Exclusion] = field(default_factory=list)
    exclude: str = ""  # the excluded nodes in Slurm's host-list form
    # What a --burnin soak found of the job and of no one node (the all_reduce among all ranks falling over the
    # soak), or of a node the job does not name: judged here, never dropped.
    job_findings: list[Finding] = field(default_factory=list)


def _probes_and_retests(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 6 -> 7: a node probe keeps its facts, not its node's whole hardware picture; a retest of a suspect
    against a healthy partner names the suspect, which version 6 said in its `why` alone."""
    fleet = doc.get("fleet")
    if not isinstance(fleet, dict):
        return doc
    if isinstance(fleet.get("probes"), list):
        fleet = {**fleet, "probes": [{k: v for k, v in p.items() if k != "hardware"} if isinstance(p, dict) else p
                                     for p in fleet["probes"]]}
    if isinstance(fleet.get("retests"), list):
        retests = []
        for t in fleet["retests"]:
            if isinstance(t, dict) and isinstance(t.get("why"), str) and (
                    found := re.fullmatch(r"suspect (.+) against healthy .+", t["why"])):
                t = {**t, "suspect": found.group(1)}
            retests.append(t)
        fleet = {**fleet, "retests": retests}
    return {**doc, "fleet": fleet}


FLEET = Section("fleet", Fleet | None, upgrades={6: _probes_and_retests})
