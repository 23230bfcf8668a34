"""A burn-in judged (docs/burnin.md): what only time shows, from its windows, each node's counters and events
read over it, and the telemetry sampled meanwhile.

Per device and figure (matmul TFLOP/s, memory GB/s; the all_reduce's busbw once, the job's), a drift: the
figure falls over the soak and stays down (stages/burnin/drift.py). Words read back wrong, a repeat that changed, and a
device outvoted by the others of its kind are each critical. Each node's counters and events over the soak (the
states at its end, what grew, the Xids new in it) are judged by the node rules, each miss a finding of the rule's
weight (FAIL critical, WARN a warning) with the actions of what stands behind it. From telemetry: clocks held
down by heat or power, ECC counts that grew, the hottest device; each finding names its node.

Metrics: burnin.windows (the fewest any device measured), burnin.partial, burnin.wrong_words,
burnin.repeat_changed (devices whose result changed), burnin.outvoted (devices outside their kind's majority),
burnin.drift (drifting series), burnin.counters / burnin.counter_warnings (the node rules' FAILs and WARNs over
the soak's counters), burnin.ecc_uncorrected / burnin.ecc_corrected (devices whose ECC count grew in the
telemetry), burnin.matmul_tflops.min / .median, burnin.memory_gbps.min / .median, burnin.busbw_gbps.median,
burnin.throttled (devices), burnin.temperature_c.max.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from clusterbench.analyse.metrics import Metrics
from clusterbench.analyse.rules import Rule
from clusterbench.nodechecks import node_rules
from clusterbench.results.findings import Finding
from clusterbench.results.run import Run
from clusterbench.stages.burnin import drift
from clusterbench.stages.burnin.records import BURNIN, TABLE, Burnin, Window, WrongWord
from clusterbench.telemetry.metrics import PROBLEMS, THROTTLED_SHARE
from clusterbench.telemetry.records import TELEMETRY, DeviceStage, Telemetry

SHOWN = 3  # wrong words, ranks or windows named in one line
SEVERITIES = ("critical", "warning", "info")  # the gravest first
# (field of Window, its name in words, what to do when it drifts)
FIGURES = (
    ("matmul_tflops", "matmul TFLOP/s",
     ("look at its clocks, temperature and power in the telemetry: a device that slows under sustained load is "
     "throttling (cooling, power delivery, a power cap); fix the cooling or reseat it, and RMA it if it persists")),
    ("memory_gbps", "memory GB/s",
     ("look at its memory clock and temperature in the telemetry: memory that slows under load is overheating or "
     "retraining; fix the cooling, and RMA the part if it persists")),
    ("busbw_gbps", "all_reduce busbw Gbps",
     ("check the links between the ranks (cables, NIC or NVLink errors, the switch port) and rerun `clusterbench "
     "fleet` to find the node or link that slowed")),
)
_ACTIONS = {name: action for name, _, action in FIGURES}
_WORDS = {name: words for name, words, _ in FIGURES}
MEMORY_ACTION = "the memory flips bits: drain the node and RMA the part (HBM/DRAM)"
CORRUPTION_ACTION = ("the device computes wrong results silently: drain the node, rerun the burn-in to confirm, "
                     "and RMA the device")
THROTTLE_ACTION = "check the cooling (fans, airflow, inlet temperature) and the power supply of the device"
ECC_GREW = "ECC errors grew during the soak"


@dataclass(frozen=True)
class Drift:
    """A figure of one device that fell over the soak and stayed down."""

    subject: str
    figure: str  # a field of Window
    shape: str  # "step" or "decline"
    start_s: float  # where it began: the end of the last window before the step, or the first window's
    end_s: float  # the last window's end
    before: float  # the earlier segment's median, or the line's fitted start
    after: float  # the later segment's median, or the line's fitted end
    node: str = ""  # the device's node; "": the job's all_reduce, of no one node

    @property
    def fell(self) -> float:
        return 1 - self.after / self.before

    def finding(self) -> Finding:
        words = _WORDS[self.figure]
        when = f"from {self.start_s:.1f} s on" if self.shape == "step" else "steadily over the soak"
        return Finding(self.subject, f"{words} fell {self.fell:.0%} {when} ({self.before:.3g} -> {self.after:.3g})",
                       "critical", _ACTIONS[self.figure], node=self.node)


def section(run: Run) -> Burnin | None:
    """The run's burn-in, or None where it has none."""
    return BURNIN.of(run)


def subject(w: Window) -> str:
    return f"rank {w.rank} {w.device} on {w.node}"


def series(windows: Iterable[Window]) -> dict[int, list[Window]]:
    """Each rank's windows in the order of time."""
    by: dict[int, list[Window]] = {}
    for w in windows:
        by.setdefault(w.rank, []).append(w)
    return {rank: sorted(rows, key=lambda w: w.t_s) for rank, rows in sorted(by.items())}


def expected_windows(b: Burnin) -> int:
    return max(1, round(b.duration_s / b.window_s))


def measured(rows: list[Window]) -> int:
    """How many windows of the soak a device's series stands for (its points may merge several:
    stages/burnin/series.py)."""
    return sum(w.spans for w in rows)


def partial(b: Burnin) -> bool:
    """Cut short: said so, or some device measured fewer windows than the soak has."""
    by = series(b.windows)
    return b.partial or not by or min(measured(rows) for rows in by.values()) < expected_windows(b)


# --- drifts ---------------------------------------------------------------------------------------------------


def drifts(b: Burnin) -> list[Drift]:
    """Every series that drifts: each device's matmul and memory figures, and the job's busbw once (every rank
    holds the same, the slowest rank's time)."""
    found = []
    by = series(b.windows)
    for rank, rows in by.items():
        for figure, _, _ in FIGURES:
            if figure == "busbw_gbps" and rank != min(by):
                continue
            who = f"all_reduce among {len(by)} ranks" if figure == "busbw_gbps" else subject(rows[0])
            points = [(w.t_s, getattr(w, figure)) for w in rows if getattr(w, figure) is not None]
            fell = find_drift([t for t, _ in points], [v for _, v in points], b.tolerance)
            if fell is not None:
                found.append(replace(fell, subject=who, figure=figure,
                                     node="" if figure == "busbw_gbps" else rows[0].node))
    return found


def find_drift(ts: Sequence[float], ys: Sequence[float], tolerance: float) -> Drift | None:
    """The drift of one series (stages/burnin/drift.find), its subject and figure left for the caller."""
    fall = drift.find(ts, ys, tolerance)
    return Drift("", "", fall.shape, fall.start_s, fall.end_s, fall.before, fall.after) if fall else None


# --- wrong results --------------------------------------------------------------------------------------------


def wrong_words(b: Burnin) -> int:
    return sum(w.wrong_words for w in b.windows)


def repeats_changed(b: Burnin) -> dict[int, Window]:
    """Each rank whose deterministic computation changed from its own first result: its first window that did."""
    changed: dict[int, Window] = {}
    for rank, rows in series(b.windows).items():
        first = next((w for w in rows if w.repeat_same is False), None)
        if first is not None:
            changed[rank] = first
    return changed


def outvoted(b: Burnin) -> dict[int, list[Window]]:
    """Each rank whose deterministic result differed from the majority of the devices of its kind in a window
    (or that stood in a window whose devices split with no majority): the windows it did."""
    out: dict[int, list[Window]] = {}
    windows: dict[tuple[int, str], list[Window]] = {}
    for rows in series(b.windows).values():
        for i, w in enumerate(rows):
            if w.digest is not None:
                windows.setdefault((i, w.kind), []).append(w)
    for group in windows.values():
        votes = Counter(w.digest for w in group)
        if len(group) < 2 or len(votes) == 1:
            continue
        digest, count = votes.most_common(1)[0]
        majority = digest if count > len(group) / 2 else None
        for w in group:
            if w.digest != majority:
                out.setdefault(w.rank, []).append(w)
    return out


def _words(count: int) -> str:
    return f"{count} word{'' if count == 1 else 's'}"


def _words_text(words: Sequence[WrongWord]) -> str:
    return ", ".join(f"0x{w.offset:x} (wrote {w.wrote}, read {w.read})" for w in words[:SHOWN])


# --- telemetry ------------------------------------------------------------------------------------------------


def soak_telemetry(t: Telemetry | None) -> list[DeviceStage]:
    """Each device's telemetry over the soak (its stage is the burnin stage's, alone or in `run`)."""
    return [d for d in (t.devices if t else []) if d.stage == TABLE]


def _throttled(d: DeviceStage) -> str:
    held = [(r, share) for r, share in (d.throttle or {}).items() if r in PROBLEMS and share >= THROTTLED_SHARE]
    return ", ".join(f"{r} in {share:.0%} of the samples" for r, share in held)


def ecc_grew(rows: list[DeviceStage], which: str) -> list[DeviceStage]:
    """The devices whose `which` ("uncorrected", "corrected") ECC count grew in the soak's telemetry."""
    return [d for d in rows if (spread := getattr(d, f"ecc_{which}")) is not None and spread.max > spread.min]


def telemetry_findings(rows: list[DeviceStage]) -> list[Finding]:
    """What the soak's telemetry shows, each finding of the node its device is on (telemetry's host is the node as
    the job names it)."""
    found = []
    for d in rows:
        why = _throttled(d)
        if why:
            found.append(Finding(d.where, f"clocks held down during the soak: {why}", "warning", THROTTLE_ACTION,
                                 node=d.host))
    for which, severity in (("uncorrected", "critical"), ("corrected", "warning")):
        for d in ecc_grew(rows, which):
            spread = getattr(d, f"ecc_{which}")
            found.append(Finding(d.where, f"{which} {ECC_GREW} ({spread.min:.0f} -> {spread.max:.0f})", severity,
                                 MEMORY_ACTION, f"burnin.ecc_{which}", d.host))
    hot = [d for d in rows if d.temperature_c is not None]
    if hot:
        top = max(hot, key=lambda d: d.temperature_c.max)
        found.append(Finding(top.where, f"the hottest device of the soak: {top.temperature_c.max:.0f} °C at most",
                             "info", "none: for the record", node=top.host))
    return found


# --- counters -------------------------------------------------------------------------------------------------


def counter_findings(b: Burnin, rules: list[Rule]) -> list[Finding]:
    """Each node's counters and events over the soak judged by the node rules: each miss a finding of its node, of
    the rule's weight; what no rule judged, as information."""
    found = []
    for nc in b.counters:
        misses = node_rules.judge(nc.counts, nc.findings, rules)
        found += [m.finding(nc.node) for m in misses]
        judged = {m.metric for m in misses}
        found += [replace(f, subject=f"{f.subject} on {nc.node}", severity="info", metric="", node=nc.node)
                  for f in nc.findings if f.metric not in judged]
    return found


# --- the conclusion and the metrics ---------------------------------------------------------------------------


def findings(b: Burnin, telemetry: Telemetry | None, rules: list[Rule]) -> list[Finding]:
    """Everything the soak found: in its memory, its repeats, its vote, its figures over time, its nodes' counters
    (judged by `rules`, the node rules), its telemetry."""
    found = []
    by_rank: dict[int, list[WrongWord]] = {}
    for word in b.wrong:
        by_rank.setdefault(word.rank, []).append(word)
    for rank, rows in series(b.windows).items():
        count = sum(w.wrong_words for w in rows)
        if count:
            words = by_rank.get(rank, [])
            first = f", first at offset {_words_text(words)}" if words else ""
            addresses = ", ".join(f"0x{w.offset:x}" for w in words[:SHOWN])
            found.append(Finding(subject(rows[0]), f"{_words(count)} read back wrong in the memory test{first}",
                                 "critical", f"{MEMORY_ACTION}; first offsets: {addresses or 'not kept'}",
                                 node=rows[0].node))
    for rank, w in repeats_changed(b).items():
        found.append(Finding(subject(w), f"the deterministic computation changed from its first result at "
                                         f"{w.t_s:.1f} s (same input, same device)", "critical", CORRUPTION_ACTION,
                             node=w.node))
    for rank, rows in outvoted(b).items():
        times = ", ".join(f"{w.t_s:.1f} s" for w in rows[:SHOWN]) + (f" and {len(rows) - SHOWN} more"
                                                                      if len(rows) > SHOWN else "")
        found.append(Finding(subject(rows[0]), f"the deterministic computation disagreed with the other "
                                               f"{rows[0].kind} devices in {_windows(rows)} ({times})",
                             "critical", CORRUPTION_ACTION, node=rows[0].node))
    found += [d.finding() for d in drifts(b)]
    return found + counter_findings(b, rules) + telemetry_findings(soak_telemetry(telemetry))


def _windows(rows: list[Window]) -> str:
    """How many windows these are, where thinning merged them into points of several."""
    return f"{len(rows)} windows" if all(w.spans == 1 for w in rows) else f"{len(rows)} stretches of windows"


def judge_soak(b: Burnin, telemetry: Telemetry | None, cut_short: bool, rules: list[Rule] | None = None) -> Burnin:
    """The soak with its findings, its counters judged by `rules` (None: the shipped node rules), partial where the
    run did not complete or a device measured fewer windows than the soak has."""
    found = findings(b, telemetry, rules if rules is not None else node_rules.load())
    return replace(b, partial=cut_short or partial(b), concluded=True,
                   findings=sorted(found, key=lambda f: SEVERITIES.index(f.severity)))


def judged(run: Run) -> Burnin | None:
    """The run's burn-in as concluded: by the node rules it was given, or, where its conclusion never ran (its owner
    died too), now, by the shipped ones."""
    b = section(run)
    if b is None or b.concluded:
        return b
    return judge_soak(b, TELEMETRY.of(run), run.status != "complete")


def _put_spread(m: Metrics, name: str, values: list[float], unit: str, *which: str) -> None:
    if not values:
        return
    for stat in which:
        value = min(values) if stat == "min" else statistics.median(values)
        m.put(f"{name}.{stat}", value, f"{stat} {value:.4g} {unit} over {len(values)} device windows")


def metrics(run: Run, m: Metrics) -> None:
    b = judged(run)
    if b is None:
        return
    by = series(b.windows)
    if by:
        fewest = min(measured(rows) for rows in by.values())
        m.put("burnin.windows", fewest, f"{fewest} windows per device of {expected_windows(b)}")
    cut = partial(b)
    m.put("burnin.partial", cut, f"the soak was cut short after {b.elapsed_s:.1f} s of {b.duration_s:.0f} s"
          if cut else f"the whole soak, {b.duration_s:.0f} s")
    count = wrong_words(b)
    m.put("burnin.wrong_words", count, f"{_words(count)} read back wrong, first at offset {_words_text(b.wrong)}"
          if count and b.wrong else f"{_words(count)} read back wrong")
    changed = repeats_changed(b)
    m.put("burnin.repeat_changed", len(changed), "; ".join(f"{subject(w)} changed at {w.t_s:.1f} s"
                                                          for w in changed.values()) or "every repeat the same")
    split = outvoted(b)
    m.put("burnin.outvoted", len(split), "; ".join(f"{subject(rows[0])} disagreed in {_windows(rows)}"
                                                   for rows in split.values()) or "every device with its kind's majority")
    found = drifts(b)
    m.put("burnin.drift", len(found), "; ".join(f"{d.subject}: {d.finding().what}" for d in found[:SHOWN])
          or f"no figure fell by more than {b.tolerance:.0%}")
    _put_spread(m, "burnin.matmul_tflops", [w.matmul_tflops for w in b.windows if w.matmul_tflops is not None],
                "TFLOP/s", "min", "median")
    _put_spread(m, "burnin.memory_gbps", [w.memory_gbps for w in b.windows if w.memory_gbps is not None],
                "GB/s", "min", "median")
    _put_spread(m, "burnin.busbw_gbps", [w.busbw_gbps for w in b.windows if w.busbw_gbps is not None],
                "Gbps", "median")
    for level, severity, words in (("counters", "critical", "FAIL"), ("counter_warnings", "warning", "WARN")):
        misses = [f for f in b.findings if f.metric.startswith("counters.") and f.severity == severity]
        m.put(f"burnin.{level}", len(misses), "; ".join(f"{f.subject}: {f.what}" for f in misses[:SHOWN])
              or f"no node rule says {words} of {len(b.counters)} nodes' counters over the soak")
    rows = soak_telemetry(TELEMETRY.of(run))
    for which in ("uncorrected", "corrected"):
        if any(getattr(d, f"ecc_{which}") is not None for d in rows):
            grew = ecc_grew(rows, which)
            m.put(f"burnin.ecc_{which}", len(grew), f"{which} {ECC_GREW} on {', '.join(d.where for d in grew)}"
                  if grew else f"no {which} ECC error in the telemetry of the soak")
    sampled = [d for d in rows if d.throttle is not None]
    if sampled:
        held = [d.where for d in sampled if _throttled(d)]
        m.put("burnin.throttled", len(held), f"clocks held down on {', '.join(held)}" if held
              else f"no clock held down by heat or power on {len(sampled)} devices")
    hot = [d.temperature_c.max for d in rows if d.temperature_c is not None]
    if hot:
        m.put("burnin.temperature_c.max", max(hot), f"{max(hot):.0f} °C at most")
