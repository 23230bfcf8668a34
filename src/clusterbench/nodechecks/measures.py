"""How the node checks of nodechecks.NODE_CHECKS are measured: the functions their entries name, and run_checks,
through which `check`, the fleet's node-local phase and its rechecks all measure, so that a fleet's bands judge a
check's figures."""

from __future__ import annotations

import importlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from clusterbench import limits
from clusterbench.hw import counters, gpu_links, nvml, peaks
from clusterbench.hw.events import ACTIONS
from clusterbench.nodechecks import numerics
from clusterbench.nodechecks.table import MATMUL_DTYPE, NODE_CHECKS, NodeCheck
from clusterbench.results.findings import Finding
from clusterbench.runtime.devices import synchronize
from clusterbench.stages.burnin.collective import AllReduce
from clusterbench.stages.comm.timing import batch_loop
from clusterbench.stages.fleet.records import CopyFigure

COPIES_PER_BATCH = 4  # copies timed as one batch: one sample of the spread
MIN_BATCHES = 3  # a spread needs a few, however short the time


@dataclass(frozen=True)
class On:
    """What a check measures with: this rank's device, or the node's devices, and the node's ranks."""

    device: torch.device
    name: str  # the device's model, as torch names it
    seconds: float  # per figure
    rank: int = 0  # the job's rank: the numerics task's seed for this device
    numerics_steps: int = 0
    group: object | None = None  # the node's ranks' process group, where it has several
    ranks: int = 1
    turn: int = 0  # this rank's place among its node's ranks: when it measures a check done alone
    devices: tuple[torch.device, ...] = ()  # the node's GPUs that this process sees (node scope)
    counters_of: tuple[counters.GpuRef, ...] = ()  # the GPUs whose counters the node's checks read


@dataclass
class Found:
    figures: dict[str, float] = field(default_factory=dict)  # judged by the bands
    counts: dict[str, float] = field(default_factory=dict)  # judged by the node rules
    findings: list[Finding] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)  # the numerics task's, judged by the vote
    copies: list[CopyFigure] = field(default_factory=list)  # the spread of each copy, against its link

    def add(self, other: Found) -> None:
        self.figures.update(other.figures)
        for name, value in other.counts.items():
            self.counts[name] = self.counts.get(name, 0.0) + value
        self.findings += other.findings
        self.losses += other.losses
        self.copies += other.copies


def measure_of(check: NodeCheck) -> Callable[[On], Found]:
    """The function an entry names ("module:function"), loaded where it runs."""
    module, _, function = check.measure.partition(":")
    return getattr(importlib.import_module(module), function)


def node_counters(on: On) -> Found:
    snap = counters.snapshot(list(on.counters_of))
    return Found(counts=counters.figures(None, snap), findings=counters.states(snap))


def device_peaks(on: On) -> Found:
    kind = "cpu" if on.device.type == "cpu" else "cuda"
    measured = peaks.measure_device(str(on.device), on.name, [MATMUL_DTYPE[kind]], NODE_CHECKS["peaks"].size(kind),
                                    on.seconds)
    return Found({"matmul_tflops": measured.matmul[0].tflops, "copy_gbps": measured.copy.gbps})


def _copies(copy: Callable[[], None], nbytes: int, device: torch.device, seconds: float,
            between: Callable[[], None] = lambda: None) -> list[float]:
    """GB/s of each batch of `copy`, repeated for about `seconds` (MIN_BATCHES at least); `between` runs after
    each batch (a reading of the link the copies load)."""
    copy()
    synchronize(device)
    rates: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(rates) < MIN_BATCHES:
        rates.append(nbytes / batch_loop(copy, COPIES_PER_BATCH, device)[0] / 1e9)
        between()
    return rates


def _figure(subject: str, metric: str, rates: list[float], theory: gpu_links.Theory | None) -> CopyFigure:
    return CopyFigure(subject, metric, max(rates), statistics.median(rates), min(rates), len(rates),
                      theory.gbps if theory else None, theory.link if theory else "")


def _uuid(device: torch.device) -> str | None:
    return str(torch.cuda.get_device_properties(device).uuid) if device.type == "cuda" else None


def host_device(on: On) -> Found:
    """Pinned copies each way, the link's generation read between the batches: below its maximum under load, the
    link trained down (a reading while idle proves nothing: an idle GPU lowers it on purpose)."""
    nbytes = NODE_CHECKS["host_device"].size(on.device.type)
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=on.device)
    with gpu_links.PcieWatch(_uuid(on.device)) as watch:
        h2d = _copies(lambda: dev.copy_(host, non_blocking=True), nbytes, on.device, on.seconds / 2, watch.read)
        d2h = _copies(lambda: host.copy_(dev, non_blocking=True), nbytes, on.device, on.seconds / 2, watch.read)
    theory = None
    if watch.gen_max and watch.width_max:
        gbps = limits.pcie_gbps(watch.gen_max, watch.width_max)
        theory = gpu_links.Theory(gbps, f"PCIe gen{watch.gen_max} x{watch.width_max}") if gbps else None
    label = str(on.device)
    found = Found({"h2d_gbps": max(h2d), "d2h_gbps": max(d2h)},
                  copies=[_figure(label, "h2d_gbps", h2d, theory), _figure(label, "d2h_gbps", d2h, theory)])
    drop = watch.gen_drop
    if drop is not None:
        found.counts["counters.pcie_gen_drop"] = float(drop > 0)
        if drop:
            found.findings.append(Finding(label, f"PCIe link at gen {watch.gen} of {watch.gen_max} while its copies "
                                                 "loaded it", "warning", ACTIONS["reseat"], "counters.pcie_gen_drop"))
    return found


def peer_copies(on: On) -> Found:
    """Every ordered pair of the node's GPUs, each against the links between them; the slowest pair is the figure,
    and a finding names it."""
    if len(on.devices) < 2:
        return Found()
    nbytes = NODE_CHECKS["peer_copies"].size("cuda")
    buffers = {d: torch.empty(nbytes, dtype=torch.uint8, device=d) for d in on.devices}
    links = gpu_links.links_of([u for u in map(_uuid, on.devices) if u])
    link_of = {d: links.get(nvml.uuid_key(_uuid(d))) for d in on.devices}
    pairs = [(a, b) for a in on.devices for b in on.devices if a != b]
    share = on.seconds / len(pairs)
    copies = []
    for a, b in pairs:
        rates = _copies(lambda a=a, b=b: buffers[b].copy_(buffers[a], non_blocking=True), nbytes, a, share)
        la, lb = link_of[a], link_of[b]
        copies.append(_figure(f"{a} -> {b}", "p2p_min_gbps", rates, gpu_links.between(la, lb) if la and lb else None))
    slowest = min(copies, key=lambda c: c.gbps)
    fastest = max(c.gbps for c in copies)
    return Found({"p2p_min_gbps": slowest.gbps}, copies=copies,
                 findings=[Finding(slowest.subject, f"the slowest of {len(pairs)} GPU-to-GPU copies: {slowest.text()}; "
                                                    f"the fastest pair {fastest:.3g} GB/s", "info", "")])


def intra_all_reduce(on: On) -> Found:
    """all_reduce bus bandwidth (Gbps) among the node's ranks, timed as the comm sweep times its calls."""
    busbw = AllReduce(on.device, on.ranks, on.group).busbw_gbps(on.seconds)
    return Found({"intra_busbw_gbps": busbw} if busbw is not None else {})


def numerics_task(on: On) -> Found:
    return Found(losses=numerics.losses(on.device, on.rank, on.numerics_steps))


def applies(check: NodeCheck, on: On) -> bool:
    """Whether `check` has anything to measure with `on` (a GPU check on a CPU, the vote without steps)."""
    if check.gpu_only and on.device.type != "cuda":
        return False
    if check.votes and not on.numerics_steps:
        return False
    return check.scope != "ranks" or on.group is not None


def run_checks(on: On, scopes: set[str], names: tuple[str, ...] | None = None) -> Found:
    """Every check of `scopes` that applies (of `names`, when given), in the table's order. A check done alone on a
    node of several ranks is measured in turns: each rank in its own (a node check, its first rank), the others
    waiting at the node's barrier."""
    found = Found()
    for check in NODE_CHECKS.values():
        if names is not None and check.name not in names:
            continue
        mine = check.scope in scopes and applies(check, on)
        if not _in_turns(check, on):
            if mine:
                found.add(measure_of(check)(on))
            continue
        for turn in range(1 if check.scope == "node" else on.ranks):
            dist.barrier(group=on.group)
            if turn == on.turn and mine:
                found.add(measure_of(check)(on))
        dist.barrier(group=on.group)
    return found


def _in_turns(check: NodeCheck, on: On) -> bool:
    """Whether the node's ranks take turns at `check`: one done alone, on a node of several ranks, of devices it
    applies to (what decides it is the same on every rank of a node: each rank calls as many barriers)."""
    return check.alone and on.group is not None and (not check.gpu_only or on.device.type == "cuda")
