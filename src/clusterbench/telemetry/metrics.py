"""Device telemetry in numbers rules can judge (docs/methodology.md §10).

telemetry.throttled   device x stage pairs whose clocks heat or a power fault held down
                      (hw_slowdown, hw_thermal, sw_thermal, hw_power_brake) in at least
                      THROTTLED_SHARE of the stage's samples; only where a device reports reasons
telemetry.ecc_grown   devices whose volatile ECC error counts (corrected or not) grew during the run
telemetry.stragglers  devices whose median clock or power in a stage sits below STRAGGLER_RATIO x
                      the median of their busy peers (devices of the same model) in that stage
"""

from __future__ import annotations

import statistics

from clusterbench.results.run import Run
from clusterbench.telemetry.records import TELEMETRY, DeviceStage

# Not sw_power_cap: a GPU running a GEMM or a training step at full load sits at its power limit by
# design. A limit set lower than its peers' shows as a straggler's power and clock instead.
PROBLEMS = ("hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake")
THROTTLED_SHARE = 0.05  # a cap touched for a moment is how power management works; a twentieth of a stage is not
STRAGGLER_RATIO = 0.85
BUSY_PCT = 50.0  # idle clocks and power say nothing about a device's health
# One reading (a stage shorter than the sampling period) is a moment, not the stage's clock; on a CPU
# it has no busy share either (/proc/stat counts 10 ms jiffies), so an idle moment would pass as busy.
STRAGGLER_SAMPLES = 2
_SHOWN = 3


def telemetry_values(run: Run) -> dict[str, tuple[float, str]]:
    """Each metric this run's telemetry gives, with its note; absent where no device could tell."""
    if TELEMETRY.of(run) is None:
        return {}
    found: dict[str, tuple[float, str]] = {}
    rows = TELEMETRY.of(run).devices
    judged = [d for d in rows if d.throttle is not None]
    if judged:
        hits = [(d, _throttled(d)) for d in judged]
        hits = [(d, why) for d, why in hits if why]
        found["telemetry.throttled"] = (float(len(hits)), _listed(
            [f"{d.where} in {d.stage}: {why}" for d, why in hits], "throttled device x stage pairs",
            f"no clock held down by power or heat in {len(judged)} device x stage pairs"))
    with_ecc = _devices([d for d in rows if d.ecc_corrected or d.ecc_uncorrected])
    if with_ecc:
        grown = [f"{where}: {why}" for where, why in ((w, _ecc_growth(s)) for w, s in with_ecc.items()) if why]
        found["telemetry.ecc_grown"] = (float(len(grown)), _listed(
            grown, "devices whose ECC error counts grew", f"no ECC error count grew on {len(with_ecc)} devices"))
    slow, compared = _stragglers(rows)
    if compared:
        by_device: dict[str, list[str]] = {}
        for d, why in slow:
            by_device.setdefault(d.where, []).append(f"{why} in {d.stage}")
        found["telemetry.stragglers"] = (float(len(by_device)), _listed(
            [f"{where}: {', '.join(whys)}" for where, whys in by_device.items()], "devices below their peers",
            f"every busy device within {STRAGGLER_RATIO:g} x its peers' median clock and power"))
    return found


def _throttled(d: DeviceStage) -> str:
    """The problem reasons held in at least THROTTLED_SHARE of the samples, in words ("" none)."""
    held = [(r, share) for r, share in (d.throttle or {}).items() if r in PROBLEMS and share >= THROTTLED_SHARE]
    return ", ".join(f"{r} {share:.0%} of the samples" for r, share in held)


def _devices(rows: list[DeviceStage]) -> dict[str, list[DeviceStage]]:
    by: dict[str, list[DeviceStage]] = {}
    for d in rows:
        by.setdefault(d.where, []).append(d)
    return by


def _ecc_growth(stages: list[DeviceStage]) -> str:
    """How a device's ECC counts moved over the run ("" unchanged); the counts only ever grow."""
    moved = []
    for label, spreads in (("uncorrected", [s.ecc_uncorrected for s in stages]),
                           ("corrected", [s.ecc_corrected for s in stages])):
        known = [s for s in spreads if s is not None]
        first, last = min((s.min for s in known), default=0), max((s.max for s in known), default=0)
        if last > first:
            moved.append(f"{label} {first:.0f} -> {last:.0f}")
    return ", ".join(moved)


def _stragglers(rows: list[DeviceStage]) -> tuple[list[tuple[DeviceStage, str]], bool]:
    """(device x stage pairs below their peers, with the reason; whether any device had peers to compare)."""
    groups: dict[tuple[str, str], list[DeviceStage]] = {}
    for d in rows:
        if d.samples >= STRAGGLER_SAMPLES and (d.util_pct is None or d.util_pct.median >= BUSY_PCT):
            groups.setdefault((d.stage, d.kind), []).append(d)
    slow: list[tuple[DeviceStage, str]] = []
    compared = False
    for group in groups.values():
        if len(group) < 2:
            continue
        compared = True
        for d in group:
            why = [_below(d, [p for p in group if p is not d], figure, unit)
                   for figure, unit in (("clock_mhz", "MHz"), ("power_w", "W"))]
            if any(why):
                slow.append((d, ", ".join(w for w in why if w)))
    return slow, compared


def _below(d: DeviceStage, peers: list[DeviceStage], figure: str, unit: str) -> str:
    mine = getattr(d, figure)
    theirs = [getattr(p, figure).median for p in peers if getattr(p, figure) is not None]
    if mine is None or not theirs:
        return ""
    median = statistics.median(theirs)
    if median <= 0 or mine.median >= STRAGGLER_RATIO * median:
        return ""
    name = "clock" if figure == "clock_mhz" else "power"
    return f"{name} {mine.median:.0f} {unit} = {mine.median / median:.2f} x its peers' median {median:.0f} {unit}"


def _listed(items: list[str], what: str, fine: str) -> str:
    if not items:
        return fine
    more = f"; and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
    return f"{what} ({len(items)}): " + "; ".join(items[:_SHOWN]) + more
