"""How each node check of nodechecks.NODE_CHECKS is measured, one function per entry: `check`, the fleet's
node-local phase and its rechecks all measure through these, so that a fleet's bands judge a check's figures."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from clusterbench.collectives import COLLECTIVES
from clusterbench.comm.timing import RankReducer, batch_loop, time_op
from clusterbench.devices import synchronize
from clusterbench.fleet import numerics
from clusterbench.hw import counters, peaks
from clusterbench.nodechecks import NODE_CHECKS, NodeCheck
from clusterbench.results.findings import Finding

# Matmul sizes: a GPU needs 8192 to reach its peak; on a CPU 512 is already compute-bound and keeps a
# fleet of busy hosts quick.
MATMUL_N = {"cuda": 8192, "cpu": 512}
ALL_REDUCE_BYTES = {"cuda": 256 * 1024**2, "cpu": 4 * 1024**2}
ALL_REDUCE_ITERS = 5
COPY_BYTES = 256 * 1024**2  # host-device and peer copies: large enough for a PCIe or NVLink link's full rate


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
    devices: tuple[torch.device, ...] = ()  # the node's GPUs that this process sees (node scope)
    counters_of: tuple[counters.GpuRef, ...] = ()  # the GPUs whose counters the node's checks read


@dataclass
class Found:
    figures: dict[str, float] = field(default_factory=dict)  # judged by the bands
    counts: dict[str, float] = field(default_factory=dict)  # judged by the node rules
    findings: list[Finding] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)  # the numerics task's, judged by the vote

    def add(self, other: Found) -> None:
        self.figures.update(other.figures)
        self.counts.update(other.counts)
        self.findings += other.findings
        self.losses += other.losses


def node_counters(on: On) -> Found:
    snap = counters.snapshot(list(on.counters_of))
    found = counters.states(snap)
    return Found(counts=counters.figures(None, snap), findings=found)


def device_peaks(on: On) -> Found:
    dtype = "bfloat16" if on.device.type == "cuda" else "float32"
    measured = peaks.measure_device(str(on.device), on.name, [dtype], MATMUL_N.get(on.device.type), on.seconds)
    return Found({"matmul_tflops": measured.matmul[0].tflops, "copy_gbps": measured.copy.gbps})


def _copy_gbps(copy: Callable[[], None], nbytes: int, device: torch.device, seconds: float) -> float:
    """GB/s of `copy`, repeated for about `seconds` (its fastest batch: a copy is only ever slowed by others)."""
    copy()
    synchronize(device)
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end or not best:
        best = max(best, nbytes / batch_loop(copy, 4, device)[0] / 1e9)
    return best


def host_device(on: On) -> Found:
    host = torch.empty(COPY_BYTES, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(COPY_BYTES, dtype=torch.uint8, device=on.device)
    h2d = _copy_gbps(lambda: dev.copy_(host, non_blocking=True), COPY_BYTES, on.device, on.seconds / 2)
    d2h = _copy_gbps(lambda: host.copy_(dev, non_blocking=True), COPY_BYTES, on.device, on.seconds / 2)
    return Found({"h2d_gbps": h2d, "d2h_gbps": d2h})


def peer_copies(on: On) -> Found:
    """Every ordered pair of the node's GPUs; the slowest pair is the figure, and a finding names it."""
    if len(on.devices) < 2:
        return Found()
    buffers = {d: torch.empty(COPY_BYTES, dtype=torch.uint8, device=d) for d in on.devices}
    pairs = [(a, b) for a in on.devices for b in on.devices if a != b]
    share = on.seconds / len(pairs)
    rates = {(a, b): _copy_gbps(lambda a=a, b=b: buffers[b].copy_(buffers[a], non_blocking=True), COPY_BYTES, a,
                                share) for a, b in pairs}
    slowest = min(rates, key=rates.__getitem__)
    return Found({"p2p_min_gbps": rates[slowest]},
                 findings=[Finding(f"{slowest[0]} -> {slowest[1]}", f"the slowest GPU-to-GPU copy, "
                                   f"{rates[slowest]:.3g} GB/s (the fastest pair: {max(rates.values()):.3g})",
                                   "info", "")])


def intra_all_reduce(on: On) -> Found:
    """all_reduce bus bandwidth (Gbps) among the node's ranks, timed as the comm sweep times its calls."""
    nbytes = ALL_REDUCE_BYTES.get(on.device.type, ALL_REDUCE_BYTES["cpu"])
    data = torch.ones(nbytes // 4, dtype=torch.float32, device=on.device)
    reduce = RankReducer("max", on.device, on.ranks, True, on.group)
    stats = time_op(lambda: torch.distributed.all_reduce(data, group=on.group), on.device, reduce,
                    iters=ALL_REDUCE_ITERS, warmup=1, budget_s=on.seconds)
    algbw = nbytes * 8 / stats.mean_s / 1e9
    return Found({"intra_busbw_gbps": algbw * COLLECTIVES["all_reduce"].busbw_factor(on.ranks)})


def numerics_task(on: On) -> Found:
    return Found(losses=numerics.losses(on.device, on.rank, on.numerics_steps))


MEASURES: dict[str, Callable[[On], Found]] = {
    "counters": node_counters,
    "peaks": device_peaks,
    "host_device": host_device,
    "peer_copies": peer_copies,
    "intra_all_reduce": intra_all_reduce,
    "numerics": numerics_task,
}


def applies(check: NodeCheck, on: On) -> bool:
    """Whether `check` has anything to measure with `on` (a GPU check on a CPU, the vote without steps)."""
    if check.gpu_only and on.device.type != "cuda":
        return False
    if check.votes and not on.numerics_steps:
        return False
    return check.scope != "ranks" or on.group is not None


def run_checks(on: On, scopes: set[str], names: tuple[str, ...] | None = None, fleet: bool = False) -> Found:
    """Every check of `scopes` that applies (of `names`, when given; only those the fleet runs, with `fleet`)."""
    found = Found()
    for check in NODE_CHECKS.values():
        if check.scope in scopes and (names is None or check.name in names) and (check.in_fleet or not fleet) \
                and applies(check, on):
            found.add(MEASURES[check.name](on))
    return found
