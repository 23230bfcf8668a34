"""A run flattened into named numbers: the common ground of verdicts, compare, rules and baselines.

Names (docs/methodology.md §6): comm.<op>.busbw_gbps.<small|medium|large|avg|top> (mean busbw in
Gbps over a size class; avg is nccl-tests' mean over all sizes; top the sizes of at least a
quarter of the largest), comm.<op>.busbw_gbps@<bytes> per exact size, comm.<op>.link_share
(top busbw against the link's theoretical one-direction figure), comm.<op>.wrong and
comm.wrong (all ops and pairs), comm.<intra|inter>.<op>.busbw_gbps.worst (the worst node or
rail), comm.pairwise.<within|across>_nodes.gbps (class medians), comm.pairwise.flagged (slow
nodes and ranks), nccl.* (what NCCL's log says: analyse/nccl.py), hardware.pcie.downtrained,
hardware.affinity.far_from_gpu (ranks pinned to another NUMA node than their GPU),
train.<summary figure>, train.completed, train.alignment.<figure>, canary.completed and
canary.alignment.<figure> (the numerics canary), peaks.matmul.<dtype>.tflops, peaks.copy.gbps,
telemetry.<throttled|ecc_grown|stragglers> (analyse/telemetry.py), and run.failed (only in a
run that did not complete).

Beside the values: a note that puts a value in words for a verdict line, and for a metric
this kind of run could have but this one has not, the reason (a CPU has no link table).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clusterbench.analyse import nccl, pairs, teams, telemetry
from clusterbench.analyse.links import link_line
from clusterbench.results.schema import CommRow, Run, Train, TrainSummary
from clusterbench.units import BITS_PER_BYTE

SMALL_MAX_BYTES = 64 * 1024  # below: latency-bound sizes
MEDIUM_MAX_BYTES = 16 * 1024**2  # from here on: bandwidth-bound sizes
SIZE_CLASSES = ("small", "medium", "large")
_TRAIN_FIGURES = ("tgs", "padded_tgs", "tflops_per_device", "mfu", "hfu", "peak_memory_bytes")
_ALIGNMENT_FIGURES = ("mre", "variance", "max_abs_dev", "first_step_error")


@dataclass(frozen=True)
class Kind:
    """Which way is better for metrics whose name matches `pattern`, and what change is noise."""

    pattern: str
    better: str | None  # "higher", "lower", or None: shown, never judged by default
    floor: float = 0.0  # a worsening smaller than this (absolute) is not a failure


# First match wins. The alignment floors are a tenth of the limits (MRE 0.02, first step 0.5 %):
# two runs both well inside the limit must not fail on a relative change of tiny numbers.
# Variance and max |d| scale with the reference's own noise, so compare only shows them;
# alignment.pass (the run's own verdict) and rules judge them.
KINDS: tuple[Kind, ...] = (
    Kind(r"comm\.(.*\.)?(wrong|flagged)", "lower"),
    Kind(r"comm\..*\.(busbw_gbps.*|link_share)", "higher"),
    Kind(r"(train|canary)\.completed|(train|canary)\.alignment\.pass", "higher"),
    Kind(r"(train|canary)\.alignment\.mre", "lower", floor=0.002),
    Kind(r"(train|canary)\.alignment\.first_step_error", "lower", floor=0.0005),
    Kind(r"(train|canary)\.alignment\..*", None),
    Kind(r"train\.peak_memory_bytes|hardware\.(pcie\.downtrained|affinity\..*)|run\.failed", "lower"),
    Kind(r"nccl\.net\.socket_with_rdma|nccl\.p2p\.shm_between_nvlink_gpus", "lower"),
    Kind(r"nccl\.net\.gdr", "higher"),
    Kind(r"nccl\..*", None),
    Kind(r"telemetry\..*", "lower"),
    Kind(r".*\.(tgs|padded_tgs|tflops_per_device|mfu|hfu|tflops|gbps)", "higher"),
)


def kind_of(name: str) -> Kind:
    for kind in KINDS:
        if re.fullmatch(kind.pattern, name):
            return kind
    return Kind(".*", None)


def size_class(size_bytes: int) -> str:
    if size_bytes < SMALL_MAX_BYTES:
        return "small"
    return "medium" if size_bytes < MEDIUM_MAX_BYTES else "large"


def bandwidth_unit(name: str) -> str | None:
    """The unit a bandwidth metric is kept in: Gbps (bits, as comm prints) or GB/s (bytes, the copy peak)."""
    if name == "peaks.copy.gbps":
        return "GB/s"
    return "Gbps" if "busbw_gbps" in name or name.endswith(".gbps") else None


def is_per_size(name: str) -> bool:
    return "@" in name


@dataclass
class Metrics:
    values: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # a value in words
    absent: dict[str, str] = field(default_factory=dict)  # why this run has no such metric
    not_run: dict[str, str] = field(default_factory=dict)  # metric families (comm, train, ...) whose stage did not run

    def put(self, name: str, value: float, note: str | None = None) -> None:
        self.values[name] = float(value)
        if note:
            self.notes[name] = note


def metrics_of(run: Run) -> Metrics:
    """Every metric this run holds, with its notes and the reasons for those it lacks."""
    m = Metrics()
    _comm(run, m)
    _hardware(run, m)
    _affinity(run, m)
    _train(run.train, m)
    _train(run.canary, m, "canary")
    _peaks(run, m)
    for name, (value, note) in nccl.values(run).items():
        m.put(name, value, note)
    for name, (value, note) in telemetry.values(run).items():
        m.put(name, value, note)
    if m.values.get("nccl.nvls") and m.values.get("comm.all_reduce.link_share", 0) > 1:
        m.notes["comm.all_reduce.link_share"] += ("; NCCL set up NVLS channels (its log), and NVLS reduces in the "
                                                  "NVSwitch, which lets busbw pass the link")
    if run.status != "complete":  # absent from a run that completed, so it adds no line to its verdicts
        m.put("run.failed", 1, run.error or f"the run is {run.status}")
    return m


def flatten(run: Run) -> dict[str, float]:
    return metrics_of(run).values


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _comm(run: Run, m: Metrics) -> None:
    if not run.comm and not run.pairs:
        m.not_run["comm"] = "the comm stage did not run"
        return
    wrongs = [(f"{r.op} {r.size_bytes} B" + ("" if r.scope == "global" else f" ({r.scope} {r.team})"), r.wrong)
              for r in run.comm] + [(f"pair {p.src} -> {p.dst}", p.wrong) for p in run.pairs]
    bad = [(what, n) for what, n in wrongs if n]
    wrong = sum(n for _, n in bad)
    where = ", ".join(f"{what} ({n} wrong)" for what, n in bad[:5])
    more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
    m.put("comm.wrong", wrong, f"{wrong} wrong elements in {len(bad)} of {len(wrongs)} measurements: {where}{more}"
          if bad else f"every element of {len(wrongs)} measurements arrived correctly")
    _scoped(run.comm, m)
    _pairwise(run, m)
    by_op: dict[str, list[CommRow]] = {}
    for row in run.comm:
        if row.scope == "global":
            by_op.setdefault(row.op, []).append(row)
    line, line_text = link_line(run)
    for op, op_rows in by_op.items():
        m.put(f"comm.{op}.wrong", sum(r.wrong for r in op_rows))
        if op_rows[0].world_size > 1:  # one rank has no bus bandwidth
            _busbw(op, op_rows, line, line_text, m)
        else:
            m.absent[f"comm.{op}.link_share"] = "one rank has no bus bandwidth"


def _scoped(rows: list[CommRow], m: Metrics) -> None:
    """Per scope and op, the worst team's busbw at its largest size."""
    groups: dict[tuple[str, str], list[CommRow]] = {}
    for r in rows:
        # Not the algo scope: a "worst algorithm" is no property of the cluster to track.
        if r.scope in ("intra", "inter") and r.world_size > 1:
            groups.setdefault((r.scope, r.op), []).append(r)
    for (scope, op), found in groups.items():
        w = teams.worst(found)
        m.put(f"comm.{scope}.{op}.busbw_gbps.worst", w.row.busbw_gbps,
              f"{op} {scope} busbw {w.row.busbw_gbps / BITS_PER_BYTE:.2f} GB/s at {w.row.size_bytes} B in "
              f"{w.row.team}, the worst of {w.teams}")
    # --algo: each send/recv algorithm's busbw at the largest sizes, kept apart from the native op's.
    built: dict[tuple[str, str], list[CommRow]] = {}
    for r in rows:
        if r.scope == "algo" and r.algo != "native" and r.world_size > 1:
            built.setdefault((r.algo, r.op), []).append(r)
    for (algo, op), found in built.items():
        largest = max(r.size_bytes for r in found)
        top = _mean([r.busbw_gbps for r in found if r.size_bytes >= largest / 4])
        m.put(f"comm.algo.{algo}.{op}.busbw_gbps.top", top)


def _pairwise(run: Run, m: Metrics) -> None:
    if not run.pairs:
        return
    for k, median in pairs.medians(run.pairs).items():
        m.put(f"comm.pairwise.{k.replace(' ', '_')}.gbps", median)
    limit = run.comm_options.flag_below if run.comm_options else 0.8
    slow = [f for f in pairs.flags(run.pairs, limit) if f.what != "pair"]
    m.put("comm.pairwise.flagged", len(slow), "; ".join(f.text() for f in slow[:3]) if slow else
          f"no node or rank below {limit:g}x its class's median")


def _busbw(op: str, rows: list[CommRow], line: float | None, line_text: str, m: Metrics) -> None:
    sizes: dict[int, list[float]] = {}
    for row in rows:
        sizes.setdefault(row.size_bytes, []).append(row.busbw_gbps)
    per_size = {size: _mean(values) for size, values in sorted(sizes.items())}
    m.put(f"comm.{op}.busbw_gbps.avg", _mean(list(per_size.values())))
    for cls in SIZE_CLASSES:
        values = [v for size, v in per_size.items() if size_class(size) == cls]
        if values:
            m.put(f"comm.{op}.busbw_gbps.{cls}", _mean(values))
    largest = max(per_size)
    top = _mean([v for size, v in per_size.items() if size >= largest / 4])
    figure = f"{op} busbw {top / BITS_PER_BYTE:.2f} GB/s at the largest sizes"
    m.put(f"comm.{op}.busbw_gbps.top", top, figure)
    for size, v in per_size.items():
        m.put(f"comm.{op}.busbw_gbps@{size}", v)
    if line is None:
        m.absent[f"comm.{op}.link_share"] = line_text
    else:
        share = top / BITS_PER_BYTE / line
        m.put(f"comm.{op}.link_share", share, f"{figure} = {share:.0%} of {line_text}")


def _hardware(run: Run, m: Metrics) -> None:
    gpus = run.hardware.gpus if run.hardware else []
    if not gpus:
        m.absent["hardware.pcie.downtrained"] = "no GPU"
    elif not all(g.pcie.under_load for g in gpus):
        m.absent["hardware.pcie.downtrained"] = "the links were read while the GPUs were idle"
    else:
        slow = [str(g.index) for g in gpus if g.pcie.downtrained]
        m.put("hardware.pcie.downtrained", len(slow),
              f"GPU {', '.join(slow)} ran below the link's max generation or width under load" if slow
              else f"{len(gpus)} GPUs at their link's generation and width under load")


def _affinity(run: Run, m: Metrics) -> None:
    """Ranks whose CPUs all sit on another NUMA node than their GPU (docs/methodology.md §12)."""
    placed = [p for p in run.env.ranks if p.device_numa is not None and p.cpu_numa]
    if not placed:
        m.absent["hardware.affinity.far_from_gpu"] = (
            "no rank's GPU has a known NUMA node" if run.env.device_type == "cuda"
            else "the ranks ran on CPUs: there is no GPU to place them near")
        return
    far = [p for p in placed if p.device_numa not in p.cpu_numa]
    loose = [p for p in placed if p.device_numa in p.cpu_numa and len(p.cpu_numa) > 1]
    if far:
        p = far[0]
        note = (f"{len(far)} of {len(placed)} ranks may run only on CPUs of another NUMA node than their GPU, "
                f"e.g. rank {p.rank} on {p.node} ({p.device}, NUMA {p.device_numa}) on CPUs {p.cpus} (NUMA "
                f"{', '.join(map(str, p.cpu_numa))}): every copy to and from the GPU crosses the link between NUMA "
                "nodes")
    elif loose:
        note = (f"{len(loose)} of {len(placed)} ranks are not pinned near their GPU (their CPUs span NUMA nodes "
                f"{', '.join(map(str, loose[0].cpu_numa))}); pinning each to its GPU's node avoids the link between "
                "NUMA nodes")
    else:
        note = f"all {len(placed)} ranks run on their GPU's NUMA node"
    m.put("hardware.affinity.far_from_gpu", len(far), note)


def _train(train: Train | None, m: Metrics, section: str = "train") -> None:
    """The train section's figures, or the canary's (only whether it completed and aligned)."""
    if train is None:
        if section == "train":
            m.not_run["train"] = "the train stage did not run"
        return
    s = train.summary
    steps = len(train.losses)
    if s is None:
        m.put(f"{section}.completed", 0, f"the run stopped after {steps} steps")
    else:
        speed = f"{steps} steps, tgs {s.tgs or 0:,.0f} tokens/device/s"
        if s.tflops_per_device is not None:
            speed += f", {s.tflops_per_device:.4g} TFLOPS/device"
        m.put(f"{section}.completed", s.status == "complete", speed if s.status == "complete" else s.stop_reason)
    if section == "train" and s is not None:
        _speed(s, m)
    a = train.alignment
    if a is None:
        m.absent[f"{section}.alignment.pass"] = train.reference_note or "no reference curve matches this task"
        return
    for key in _ALIGNMENT_FIGURES:
        value = getattr(a, key)
        if value is not None:
            m.put(f"{section}.alignment.{key}", value)
    figures = (f"MRE {a.mre:.4f} (limit {a.mre_limit:g}), variance {a.variance:.3g} (limit {a.variance_limit:.3g})"
               if a.mre is not None and a.variance is not None else "; ".join(a.reasons))
    why = f": {'; '.join(a.reasons)}" if a.reasons and a.mre is not None else ""
    m.put(f"{section}.alignment.pass", a.verdict == "PASS", f"{figures} vs {a.reference}{why}")


def _speed(s: TrainSummary, m: Metrics) -> None:
    for key in _TRAIN_FIGURES:
        value = getattr(s, key)
        if value is not None:
            m.put(f"train.{key}", value)
    if s.mfu is not None:
        m.notes["train.mfu"] = f"{s.mfu:.1%} of {s.peak_source}"
    else:
        m.absent["train.mfu"] = "no FLOPs formula for this model (Llama-style configs only)"


def _peaks(run: Run, m: Metrics) -> None:
    # The slowest device gates the whole job, so a peak across devices is their minimum.
    if run.peaks is None:
        m.not_run["peaks"] = "no peaks were measured"
        return
    for p in run.peaks.matmul:
        name = f"peaks.matmul.{p.dtype}.tflops"
        m.put(name, min(m.values.get(name, p.tflops), p.tflops))
    if run.peaks.copy:
        m.put("peaks.copy.gbps", min(c.gbps for c in run.peaks.copy))
