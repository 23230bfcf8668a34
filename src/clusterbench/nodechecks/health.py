"""A node's own health checks (docs/methodology.md §20): its devices are there, then the node checks of
nodechecks.NODE_CHECKS on one node, in the table's order, each one as its entry says (once for the node, or on
each device in turn): the counts they give judged by the node rules, the losses of the numerics task by the
vote of the node's devices, and at the end the figures by a baseline's bands. A check that fails raises
Unhealthy with the reason in one line. The figures are measured through nodechecks/measures.py as the fleet's
node-local phase measures them, so that a fleet run's bands can judge them."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from clusterbench.analyse.rules import Rule
from clusterbench.hw import counters
from clusterbench.hw.host import cpu
from clusterbench.nodechecks import bands, measures, node_rules
from clusterbench.nodechecks.bands import node_class
from clusterbench.nodechecks.table import NODE_CHECKS, NodeCheck
from clusterbench.results.documents import Band
from clusterbench.runtime.devices import device_name
from clusterbench.stages.fleet import agreement
from clusterbench.stages.fleet.records import Numerics

PEAK_SECONDS = 0.3  # per figure, the fleet's default --peak-seconds
# The peaks of all devices may take at most this share of the time left, measured again included: the
# numerics task and the slack before the deadline need the rest.
PEAK_SHARE = 0.25
MIN_PEAK_SECONDS = 0.02
NODE = "node"  # the label of what a node check measured: the store keeps its figures under it

# What the checks tell their watcher as they go: ("check", name), ("node", (what, klass)),
# ("figure", (device, metric, value, measured_again)), ("copy", (subject, metric, in words)), ("warning", line).
Tell = Callable[[str, Any], None]


class Unhealthy(Exception):
    """A check failed; the message is its reason, one line."""


class NotJudged(Exception):
    """The checks cannot judge this node as asked (no fault of its own); the message says why, one line."""


@dataclass(frozen=True)
class Device:
    device: torch.device
    name: str

    @property
    def label(self) -> str:
        return f"{self.device} ({self.name})"


@dataclass(frozen=True)
class Node:
    devices: list[Device]
    klass: str  # as the fleet names this node's hardware class
    what: str  # its devices in a few words: "cpu", "8 x NVIDIA H100 80GB HBM3"


def run(gpus: int | None, baseline: list[Band] | None, tolerance: float, steps: int, deadline: float,
        tell: Tell, rules: list[Rule] | None = None) -> int:
    """The node checks (nodechecks.NODE_CHECKS), in order, within `deadline` (time.monotonic()); how many passed.
    Raises Unhealthy. The counts are judged by `rules` (None: the shipped node rules); a WARN is told."""
    tell("check", "devices")
    node = devices(gpus)
    tell("node", (node.what, node.klass))
    mine = None if baseline is None else bands_of(node, baseline)
    rules = rules if rules is not None else node_rules.load()
    gpus_seen = tuple(d.device for d in node.devices if d.device.type == "cuda")
    left = deadline - time.monotonic()
    cost = sum(c.cost for c in NODE_CHECKS.values() if c.figures and (not c.gpu_only or gpus_seen))
    # Measured again included: twice the cost at most.
    seconds = max(MIN_PEAK_SECONDS, min(PEAK_SECONDS, PEAK_SHARE * left / (2 * max(cost, 1.0) * len(node.devices))))
    targets = _Targets(node, seconds, steps)
    figures: dict[str, dict[str, float]] = {}
    checks = 1
    for check in NODE_CHECKS.values():
        places = targets.of(check)
        if not places:
            continue
        tell("check", check.name)
        found = measures.Found()
        runs = []
        for label, on in places:
            got = measures.measure_of(check)(on)
            _told(label, got, figures, tell)
            runs.append(Numerics(on.rank, "", label, got.losses))
            found.add(got)
        for miss in node_rules.judge(found.counts, found.findings, node_rules.of(rules, check.counts)):
            if miss.level == "FAIL":
                raise Unhealthy(miss.line)
            tell("warning", miss.line)
        if check.votes:
            judge_numerics(runs, node.klass)
        checks += 1
    if mine is not None:
        tell("check", "baseline")
        judge(node, figures, mine, tolerance, lambda label: targets.again(label, tell))
        checks += 1
    return checks


def _told(label: str, got: measures.Found, figures: dict[str, dict[str, float]], tell: Tell,
          again: bool = False) -> None:
    for metric, value in got.figures.items():
        figures.setdefault(label, {})[metric] = value
        tell("figure", (label, metric, value, again))
    for c in got.copies:
        tell("copy", (c.subject, c.metric, c.text()))


class _Targets:
    """What each check measures on this node: the node once (its first device, seeing every GPU), or each device."""

    def __init__(self, node: Node, seconds: float, steps: int) -> None:
        first = node.devices[0]
        gpus_seen = tuple(d.device for d in node.devices if d.device.type == "cuda")
        self.node = [(NODE, measures.On(first.device, first.name, seconds, devices=gpus_seen,
                                        counters_of=tuple(counters.node_gpus())))]
        self.devices = [(d.label, measures.On(d.device, d.name, seconds, i, steps)) for i, d in enumerate(node.devices)]

    def of(self, check: NodeCheck) -> list[tuple[str, measures.On]]:
        """Where `check` measures; none where it has nothing to (a GPU check on a CPU, the ranks' on one process)."""
        where = {"node": self.node, "device": self.devices}.get(check.scope, [])
        return [(label, on) for label, on in where if measures.applies(check, on)]

    def again(self, label: str, tell: Tell) -> dict[str, float]:
        """The figures the bands judge of `label` (a device, or the node), measured once more."""
        figures: dict[str, dict[str, float]] = {}
        for check in NODE_CHECKS.values():
            for mine, on in self.of(check):
                if check.figures and mine == label:
                    _told(label, measures.measure_of(check)(on), figures, tell, again=True)
        return figures.get(label, {})


def devices(gpus: int | None) -> Node:
    """This node's devices: every GPU torch sees, else the CPU; `gpus`, when given, is how many it must see."""
    cores = cpu().logical_cores
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus is not None and count != gpus:
        raise Unhealthy(f"torch sees {count} GPU{'' if count == 1 else 's'}, and --gpus {gpus} were expected")
    if not count:
        dev = torch.device("cpu")
        name = device_name(dev)
        return Node([Device(dev, name)], node_class(name, 0, cores), "cpu")
    found = [Device(torch.device("cuda", i), torch.cuda.get_device_name(i)) for i in range(count)]
    return Node(found, node_class(found[0].name, count, cores), f"{count} x {found[0].name}")


def bands_of(node: Node, baseline: list[Band]) -> list[Band]:
    """The baseline's bands of this node's class; a node of another class fails (a GPU lost shows as one)."""
    mine = [b for b in baseline if b.klass == node.klass]
    if not mine:
        theirs = ", ".join(sorted({b.klass for b in baseline}))
        raise Unhealthy(f"this node is {node.klass}, and the baseline's bands are of {theirs}")
    if all(b.nodes < bands.JUDGES_FROM for b in mine):
        raise NotJudged(f"the baseline's bands of {node.klass} stand on {max(b.nodes for b in mine)} node(s), and "
                        f"a band of fewer than {bands.JUDGES_FROM} judges nobody")
    return mine


def judge_numerics(runs: list[Numerics], klass: str) -> None:
    """The losses of each device of one node (of class `klass`): all finite, and the same bit for bit."""
    for r in runs:
        bad = next((step for step, loss in enumerate(r.losses, 1) if not math.isfinite(loss)), None)
        if bad is not None:
            raise Unhealthy(f"numerics: {r.device} trains the numerics task to a loss of {r.losses[bad - 1]} "
                            f"at step {bad}")
    odd, unsettled = agreement.divergences(runs, {"": klass})
    if odd:
        d = odd[0]
        raise Unhealthy(f"numerics: {d.device} leaves the majority ({d.majority} of {d.voters} devices) at step "
                        f"{d.step} of the numerics task: {d.loss!r} against {d.majority_loss!r}")
    if unsettled:
        raise Unhealthy(next(iter(unsettled.values())))


def judge(node: Node, found: dict[str, dict[str, float]], mine: list[Band], tolerance: float,
          again: Callable[[str], dict[str, float]]) -> None:
    """Each device's figures (and the node's own, of its node checks) against its class's bands, as the fleet judges
    a node's: a figure out of its band is measured once more, and fails only when it is out again (one noisy sample
    drains no node)."""
    band_of = {b.metric: b for b in mine}
    probes = {label: (node.klass, figures) for label, figures in found.items()}
    for label, metrics in bands.outliers(probes, mine, tolerance).items():
        second = again(label)
        for metric in metrics:
            band = band_of[metric]
            if bands.out_of(band, second[metric], tolerance):
                raise Unhealthy(f"{label}: {bands.reason(metric, found[label][metric], band)}; "
                                f"{second[metric]:.3g} measured again")
