"""A node's own health checks (docs/methodology.md §20): the node checks of nodechecks.NODE_CHECKS on one node,
in order: its devices are there, its error counters and events pass the node rules, each device measures what a
fleet run measured of its hardware class, and each trains the numerics task to finite losses, on a node of
several devices the same bit for bit. A check that fails raises Unhealthy with the reason in one line. The
figures are measured through fleet/measures.py as the fleet's node-local phase measures them, so that a fleet
run's bands can judge them."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from clusterbench.analyse import agreement, bands, node_rules
from clusterbench.analyse.fleet import node_class
from clusterbench.analyse.rules import Rule
from clusterbench.devices import device_name
from clusterbench.fleet import measures, numerics
from clusterbench.fleet.local import BANDED_CHECKS
from clusterbench.hw import counters
from clusterbench.hw.host import cpu
from clusterbench.nodechecks import NODE_CHECKS
from clusterbench.results.fleet import Band, Numerics

PEAK_SECONDS = 0.3  # per figure, the fleet's default --peak-seconds
# The peaks of all devices may take at most this share of the time left, measured again included: the
# numerics task and the slack before the deadline need the rest.
PEAK_SHARE = 0.25
MIN_PEAK_SECONDS = 0.02

# What the checks tell their watcher as they go: ("check", name), ("node", (what, klass)),
# ("figure", (device, metric, value, measured_again)), ("warning", line).
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
    Raises Unhealthy. The counters are judged by `rules` (None: the shipped node rules); a WARN is told."""
    tell("check", "devices")
    node = devices(gpus)
    tell("node", (node.what, node.klass))
    mine = None if baseline is None else bands_of(node, baseline)
    first = node.devices[0]
    gpus_seen = tuple(d.device for d in node.devices if d.device.type == "cuda")
    tell("check", "counters")
    on = measures.On(first.device, first.name, 0.0, counters_of=tuple(counters.visible_gpus()))
    found = measures.run_checks(on, {"node"}, ("counters",))
    for miss in node_rules.judge(found.counts, found.findings, rules if rules is not None else node_rules.load()):
        if miss.level == "FAIL":
            raise Unhealthy(miss.line)
        tell("warning", miss.line)
    checks = 2
    left = deadline - time.monotonic()
    cost = sum(c.cost for c in NODE_CHECKS.values() if c.figures and (not c.gpu_only or gpus_seen))
    # Measured again included: twice the cost at most.
    seconds = max(MIN_PEAK_SECONDS, min(PEAK_SECONDS, PEAK_SHARE * left / (2 * cost * len(node.devices))))
    tell("check", "peaks")
    figures = {d.label: measure(d, seconds, tell) for d in node.devices}
    checks += 1
    if len(gpus_seen) > 1:
        tell("check", "peer copies")
        on = measures.On(first.device, first.name, seconds, devices=gpus_seen)
        for metric, value in measures.run_checks(on, {"node"}, ("peer_copies",)).figures.items():
            tell("figure", ("node", metric, value, False))
        checks += 1
    if steps:
        tell("check", "numerics")
        vote(node, steps)
        checks += 1
    if mine is not None:
        tell("check", "baseline")
        judge(node, figures, mine, tolerance, lambda d: measure(d, seconds, tell, again=True))
        checks += 1
    return checks


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


def measure(d: Device, seconds: float, tell: Tell, again: bool = False) -> dict[str, float]:
    """The device's figures the bands judge, as the fleet's node-local phase measures them."""
    on = measures.On(d.device, d.name, seconds)
    figures = measures.run_checks(on, {"device"}, BANDED_CHECKS).figures
    for metric, value in figures.items():
        tell("figure", (d.label, metric, value, again))
    return figures


def vote(node: Node, steps: int) -> None:
    """Each device trains the numerics task: every loss finite, and the devices agree bit for bit."""
    judge_numerics([Numerics(i, "", d.label, numerics.losses(d.device, i, steps)) for i, d in enumerate(node.devices)],
                   node.klass)


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
          again: Callable[[Device], dict[str, float]]) -> None:
    """Each device's figures against its class's bands, as the fleet judges a node's: a figure out of its
    band is measured once more, and fails only when it is out again (one noisy sample drains no node)."""
    band_of = {b.metric: b for b in mine}
    probes = {label: (node.klass, figures) for label, figures in found.items()}
    for label, metrics in bands.outliers(probes, mine, tolerance).items():
        second = again(next(d for d in node.devices if d.label == label))
        for metric in metrics:
            band = band_of[metric]
            if bands.out_of(band, second[metric], tolerance):
                raise Unhealthy(f"{label}: {bands.reason(metric, found[label][metric], band)}; "
                                f"{second[metric]:.3g} measured again")
