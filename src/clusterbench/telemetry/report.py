"""The telemetry section: clock, power, temperature and utilisation against time with the stage
boundaries, and the per-stage summaries.

The lines come from telemetry.csv beside run.json; without it (a run.json alone) each stage's
median is drawn over the stage with its min..max as a band, so the page holds the same plots.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import matplotlib.pyplot as plt

from clusterbench.report.blocks import details, esc, note, num, section, table
from clusterbench.report.plots import PALETTE, drawable, finite, inline_svg, styled
from clusterbench.results.run import Run
from clusterbench.telemetry.records import (
    TABLE,
    TELEMETRY,
    DeviceStage,
    Sample,
    Spread,
    StageWindow,
    Telemetry,
    read_samples,
)

PLOTS = (("clock_mhz", "clock (MHz)"), ("power_w", "power (W)"), ("temperature_c", "temperature (°C)"),
         ("util_pct", "utilisation (%)"))
# Summary columns: (figure, header); a column no device knows is left out.
_COLUMNS = (("clock_mhz", "clock MHz"), ("mem_clock_mhz", "memory clock MHz"), ("power_w", "power W"),
            ("temperature_c", "temp °C"), ("util_pct", "util %"), ("mem_util_pct", "memory util %"),
            ("pcie_tx_mbps", "PCIe TX MB/s"), ("pcie_rx_mbps", "PCIe RX MB/s"),
            ("nvlink_tx_mbps", "NVLink TX MB/s"), ("nvlink_rx_mbps", "NVLink RX MB/s"),
            ("ecc_corrected", "ECC corrected"), ("ecc_uncorrected", "ECC uncorrected"))
_LEGEND_MAX = 12  # more devices than this: the lines stay, the legend would bury the plot
_BOUNDARY = PALETTE[-1]
Series = dict[str, list[tuple[float, float]]]  # device -> (t, value) points


def plot_count(run: Run) -> int:
    """The section's plots: one per figure some device reported, whether or not telemetry.csv is there."""
    t = TELEMETRY.of(run)
    return 0 if t is None else sum(any(getattr(d, figure) for d in t.devices) for figure, _ in PLOTS)


def telemetry_section(run: Run, run_dir: Path | None = None) -> str:
    t = TELEMETRY.of(run)
    if t is None:
        return ""
    samples, why = _samples(run_dir)
    hosts = {d.host for d in t.devices}
    body = "".join(note(esc(n), "warn") for n in t.notes)
    if samples is None:
        body += note(f"Each line is a stage's median with its min..max band: {esc(why)}.")
    plots = []
    for figure, label in PLOTS:
        if any(getattr(d, figure) for d in t.devices):
            series = _from_samples(samples, figure, hosts) if samples is not None else None
            plots.append(_plot(f"telemetry-{figure}", label, t, series, figure, hosts))
    for pair in itertools.zip_longest(*[iter(plots)] * 2, fillvalue=""):
        body += f'<div class="op"><div>{pair[0]}</div><div>{pair[1]}</div></div>'
    if t.devices:
        body += "<h3>Per stage and device: median [min..max]</h3>" + _summary_table(t.devices)
    if t.stages:
        windows = [[esc(w.name), num(w.start_s, 4), num(w.end_s, 4)] for w in t.stages]
        body += details("stage windows (seconds since the first stage began)",
                        table(["stage", "start s", "end s"], windows))
    lead = (f"Sampled {t.hz:g} times a second per device while the stages ran (on CPUs one rank per host "
            "samples the CPU it shares); dashed lines mark the stage boundaries. Rules: docs/methodology.md §10.")
    return section("telemetry", "Telemetry", body, lead=lead)


def _samples(run_dir: Path | None) -> tuple[list[Sample] | None, str]:
    if run_dir is None:
        return None, "no run folder given"
    path = Path(run_dir) / f"{TABLE}.csv"
    if not path.exists():
        return None, f"{path.name} is not beside run.json"
    try:
        return read_samples(path), ""
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return None, f"{path.name} could not be read ({e})"


def _label(host: str, device: str, hosts: set[str]) -> str:
    return device if len(hosts) < 2 else f"{host} {device}"


def _from_samples(samples: list[Sample], figure: str, hosts: set[str]) -> Series:
    series: Series = {}
    for s in samples:
        value = getattr(s, figure)
        if value is not None:
            series.setdefault(_label(s.host, s.device, hosts), []).append((s.t_s, value))
    return series


def _plot(name: str, label: str, t: Telemetry, series: Series | None, figure: str, hosts: set[str]) -> str:
    """One figure against time: a line per device (or per-stage medians and bands), stage boundaries."""
    windows = {w.name: w for w in t.stages}
    devices = list(dict.fromkeys(_label(d.host, d.device, hosts) for d in t.devices))
    colors = dict(zip(devices, itertools.cycle(PALETTE[:-1])))
    with styled():
        fig, ax = plt.subplots(figsize=(6.4, 2.8))
        if series is not None:
            for device, points in series.items():
                shown = drawable(*zip(*points))
                if shown:
                    ax.plot(*zip(*shown), linewidth=1.2, color=colors.get(device, PALETTE[0]), label=device)
        else:
            _draw_summaries(ax, t.devices, figure, windows, colors, hosts)
        _boundaries(ax, t.stages)
        ax.set_xlabel("seconds since the first stage began")
        ax.set_ylabel(label)
        ax.ticklabel_format(axis="y", style="plain", useOffset=False)  # 1980 MHz, not 0.0 + 1.98e3
        if figure == "util_pct":
            ax.set_ylim(0, 105)  # a share: a dip from 100 to 90 must not fill the plot
        ax.grid(True, axis="y", linewidth=0.6)
        # A samples file with no rows draws no line to name.
        if 1 < len(devices) <= _LEGEND_MAX and ax.get_legend_handles_labels()[0]:
            # Below the axes: inside, it would hide the lines it names.
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=min(6, len(devices)))
    return inline_svg(fig, name)


def _draw_summaries(ax: plt.Axes, rows: list[DeviceStage], figure: str, windows: dict[str, StageWindow],
                    colors: dict[str, str], hosts: set[str]) -> None:
    labelled: set[str] = set()
    for d in rows:
        spread: Spread | None = getattr(d, figure)
        w = windows.get(d.stage)
        if spread is None or w is None or not finite(w.start_s, w.end_s, spread.min, spread.median, spread.max):
            continue
        device = _label(d.host, d.device, hosts)
        ax.fill_between([w.start_s, w.end_s], spread.min, spread.max, color=colors[device], alpha=0.15, linewidth=0)
        ax.hlines(spread.median, w.start_s, w.end_s, color=colors[device], linewidth=1.6,
                  label=None if device in labelled else device)
        labelled.add(device)


def _boundaries(ax: plt.Axes, stages: list[StageWindow]) -> None:
    stages = [w for w in stages if finite(w.start_s, w.end_s)]
    if not stages:
        return
    span = max(w.end_s for w in stages) - min(w.start_s for w in stages) or 1.0
    for w in stages:
        ax.axvline(w.start_s, color=_BOUNDARY, linestyle="--", linewidth=0.8)
        if w.end_s - w.start_s >= 0.04 * span:  # a name wider than its stage would cover its neighbour's
            ax.text((w.start_s + w.end_s) / 2, 1.01, w.name, transform=ax.get_xaxis_transform(), ha="center",
                    va="bottom", fontsize=7, color=_BOUNDARY)
    ax.axvline(stages[-1].end_s, color=_BOUNDARY, linestyle="--", linewidth=0.8)


def _summary_table(rows: list[DeviceStage]) -> str:
    columns = [(f, h) for f, h in _COLUMNS if any(getattr(d, f) for d in rows)]
    xid = any(d.xid_events is not None for d in rows)
    throttle = any(d.throttle is not None for d in rows)
    headers = ["stage", "device", "samples", *(h for _, h in columns)]
    headers += ["XID events"] * xid + ["throttle reasons (share of samples)"] * throttle
    body = []
    for d in rows:
        cells = [esc(d.stage), esc(d.where), str(d.samples), *(_cell(getattr(d, f)) for f, _ in columns)]
        if xid:
            cells.append(esc(d.xid_events))
        if throttle:
            reasons = ", ".join(f"{r} {share:.0%}" for r, share in (d.throttle or {}).items())
            cells.append(esc(reasons or ("none" if d.throttle is not None else None)))
        body.append(cells)
    return table(headers, body, numeric_from=2)


def _cell(s: Spread | None) -> str:
    return "-" if s is None else f"{num(s.median, 4)} [{num(s.min, 4)}..{num(s.max, 4)}]"
