"""The report's plots, drawn by matplotlib and inlined as SVG text.

Why matplotlib to static SVG rather than a bundled JavaScript plotting library: the
report must open offline, years later, from a mail attachment or a CI artifact. Inline
SVG needs no script, no network and no plugin; it stays sharp at any zoom, prints, and
its text is searchable. matplotlib is already the plotting tool of this field, renders
without a display through its Agg backend, and adds no bundled JS for anyone to audit
or update. The cost is no hover tooltips, so the tables (beside a plot or one click
away) carry the exact numbers.

Several SVGs share one HTML document and so one id namespace, while matplotlib numbers
its ids per figure (figure_1, clip paths, glyphs): every id in a plot, and every
reference to one, gets the plot's name as a prefix.

Every series passes `drawable` on its way to matplotlib: a NaN or infinite figure (a NaN
loss, a time that overflowed) is left out of its plot, where matplotlib would fail the whole
page over one point; the tables beside the plot still show it.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import math
import re
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import matplotlib
import numpy as np

# No display on a cluster node or in CI; the backend must be chosen before pyplot loads.
matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

from clusterbench.units import human_bytes

PALETTE = ("#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#65a30d", "#475569")
_INK, _GRID, _MUTED = "#1f2937", "#e5e7eb", "#6b7280"
STYLE = {
    "font.size": 9,
    "axes.edgecolor": _GRID,
    "axes.labelcolor": _INK,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "xtick.color": _MUTED,
    "ytick.color": _MUTED,
    "grid.color": _GRID,
    "legend.frameon": False,
    "svg.fonttype": "none",  # keep text as text: smaller files, page fonts, selectable
}
_ID_USES = re.compile(r'(\bid="|url\(#|href="#)([^")]+)')


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """numpy's and matplotlib's warnings silenced: an axis out to 1e300 overflows numpy's powers on the way
    to its margins and ticks. The picture is still drawn, and the warnings are nothing a user can act on
    (stderr holds one line, an error's)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@contextlib.contextmanager
def styled() -> Iterator[None]:
    """Where a plot of the report is built: its style, and no warning on stderr."""
    with plt.rc_context(STYLE), _quiet():
        yield


def inline_svg(fig: Figure, name: str) -> str:
    """The figure as an <svg> element (no XML prologue), with ids unique to this plot."""
    buf = io.StringIO()
    with _quiet():  # drawing places the ticks
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    svg = text[text.index("<svg"):]
    ids = set(re.findall(r'\bid="([^"]+)"', svg))
    svg = _ID_USES.sub(lambda m: f"{m[1]}{name}-{m[2]}" if m[2] in ids else m[0], svg)
    # A fixed pixel size would overflow narrow screens; the viewBox keeps the aspect ratio.
    svg = re.sub(r'<svg([^>]*?) width="[^"]+" height="[^"]+"', r"<svg\1", svg, count=1)
    return svg.replace("<svg", f'<svg class="plot" data-plot="{name}" role="img"', 1)


Span = tuple[float, float]
# The two figure sizes of the comm section (inches): a pair side by side, and a small multiple.
PAIR_SIZE = (4.8, 3.3)
PANEL_SIZE = (3.6, 2.6)


@dataclass(frozen=True)
class Curve:
    """One series against message size; `band` (low, high per size) shades a spread around it."""

    sizes: Sequence[int]
    values: Sequence[float]
    band: tuple[Sequence[float], Sequence[float]] | None = None


@dataclass(frozen=True)
class Scales:
    """Axis ranges shared by the plots of a section, so that small multiples compare at a glance."""

    sizes: Span | None = None
    busbw: Span | None = None
    latency: Span | None = None


def finite(*values: float) -> bool:
    return all(math.isfinite(v) for v in values)


def drawable(*columns: Iterable[float], log: bool = False) -> list[tuple[float, ...]]:
    """The rows of `columns` (x, y, ...) matplotlib can draw: every value finite, and positive on log axes."""
    return [row for row in zip(*columns) if finite(*row) and (not log or min(row) > 0)]


def log_span(values: Iterable[float]) -> Span | None:
    """The finite positive values' range with a margin on log axes; None when there are none."""
    positive = [v for (v,) in drawable(values, log=True)]
    span = (min(positive) / 1.3, max(positive) * 1.3) if positive else None
    return span if span and all(map(math.isfinite, span)) and span[0] > 0 else None


def _plain(v: float, _: object = None) -> str:
    return f"{v:,.0f}" if v >= 1 else f"{v:g}"


def _size_axis(ax: plt.Axes, span: Span | None) -> None:
    ax.set_xscale("log", base=2)
    # numticks keeps the size labels apart on a small multiple as well as on a full plot.
    ax.xaxis.set_major_locator(LogLocator(base=4, numticks=6))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: human_bytes(v)))
    ax.set_xlabel("message size (Size column, bytes)")
    if span:
        ax.set_xlim(*span)


def _value_axis(ax: plt.Axes, label: str, span: Span | None) -> None:
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax.set_ylabel(label)
    if span:
        ax.set_ylim(*span)
    ax.grid(True, which="major", linewidth=0.6)


def _draw(ax: plt.Axes, curve: Curve, color: str, label: str) -> None:
    """The curve's drawable points (log axes), and its band where it has one."""
    points = drawable(curve.sizes, curve.values, log=True)
    if points:
        ax.plot(*zip(*points), marker="o", markersize=3, linewidth=1.6, color=color, label=label)
    band = drawable(curve.sizes, *curve.band, log=True) if curve.band else []
    if band:
        ax.fill_between(*zip(*band), color=color, alpha=0.18, linewidth=0, label="p50–p99 of calls")


def _draw_all(ax: plt.Axes, curves: dict[str, Curve], colors: Sequence[str]) -> None:
    for (label, curve), color in zip(curves.items(), itertools.cycle(colors)):
        _draw(ax, curve, color, label)


def _draw_busbw(ax: plt.Axes, curves: dict[str, Curve], unit_label: str, line: float | None, line_label: str,
                scales: Scales, colors: Sequence[str]) -> None:
    _draw_all(ax, curves, colors)
    if line and finite(line) and line > 0:
        ax.axhline(line, color=_INK, linestyle="--", linewidth=1, label=line_label)
    _value_axis(ax, f"busbw ({unit_label})", scales.busbw)


def _draw_latency(ax: plt.Axes, curves: dict[str, Curve], scales: Scales, colors: Sequence[str]) -> None:
    _draw_all(ax, curves, colors)
    _value_axis(ax, "time per call (µs)", scales.latency)


def _legend(ax: plt.Axes, loc: str, fontsize: int = 8, ncol: int = 1) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=fontsize, loc=loc, ncol=ncol)


def busbw_plot(
    name: str, curves: dict[str, Curve], unit_label: str, line: float | None = None, line_label: str = "",
    scales: Scales = Scales(), size: tuple[float, float] = PAIR_SIZE, colors: Sequence[str] = PALETTE,
    named: bool = True,
) -> str:
    """busbw (in the page's unit) against size on log-log axes, one line per curve, and the link line.

    named=False leaves the curves out of the legend, for a plot beside a latency plot that names them.
    """
    with styled():
        fig, ax = plt.subplots(figsize=size)
        if not named:
            curves = {f"_{label}": curve for label, curve in curves.items()}  # "_" keeps a label out
        _draw_busbw(ax, curves, unit_label, line, line_label, scales, colors)
        _size_axis(ax, scales.sizes)
        # busbw rises with size, so the lower right corner is the empty one.
        _legend(ax, "lower right", fontsize=7 if size[0] < PAIR_SIZE[0] else 8, ncol=2 if len(curves) > 4 else 1)
    return inline_svg(fig, name)


def latency_plot(name: str, curves: dict[str, Curve], scales: Scales = Scales(),
                 size: tuple[float, float] = PAIR_SIZE, colors: Sequence[str] = PALETTE) -> str:
    """Time per call (µs) against size on log-log axes: the figure small messages are judged by."""
    with styled():
        fig, ax = plt.subplots(figsize=size)
        _draw_latency(ax, curves, scales, colors)
        _size_axis(ax, scales.sizes)
        # Time is flat then rises with size, so the upper left corner is the empty one.
        _legend(ax, "upper left", ncol=2 if len(curves) > 4 else 1)
    return inline_svg(fig, name)


def op_panel_plot(name: str, busbw: Curve, latency: Curve, unit_label: str, line: float | None,
                  line_label: str, scales: Scales, color: str) -> str:
    """A small multiple: busbw above time per call, on one size axis, at the section's shared scales."""
    with styled():
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(PANEL_SIZE[0], 4.2), sharex=True,
                                          gridspec_kw={"hspace": 0.12})
        # The panel's title names the op: only the link line needs a legend entry ("_" hides one).
        _draw_busbw(top, {"_busbw": busbw}, unit_label, line, line_label, scales, [color])
        _draw_latency(bottom, {"Duration (mean)": latency}, scales, [color])
        _size_axis(bottom, scales.sizes)
        _legend(top, "lower right", fontsize=7)
        _legend(bottom, "upper left", fontsize=7)
    return inline_svg(fig, name)


def loss_plot(name: str, losses: Sequence[float], reference: Sequence[float] | None) -> str:
    """The loss per step against the reference curve, and below it the deviation d = l - r."""
    with styled():
        if not reference:
            fig, top = plt.subplots(figsize=(6.4, 3.0))
        else:
            fig, (top, bottom) = plt.subplots(
                2, 1, figsize=(6.4, 4.4), sharex=True, gridspec_kw={"height_ratios": [3, 1.3], "hspace": 0.08}
            )
        if reference:
            # Drawn first and lighter, so this run's line stays visible where the two agree.
            top.plot(*_steps(reference), color=_MUTED, linewidth=2.4, alpha=0.6, label="reference")
        top.plot(*_steps(losses), color=PALETTE[0], linewidth=1.4, label="this run")
        if reference:
            dev = _steps([loss - ref for loss, ref in zip(losses, reference)])
            bottom.axhline(0, color=_MUTED, linewidth=0.8)
            bottom.fill_between(*dev, color=PALETTE[1], alpha=0.25, linewidth=0)
            bottom.plot(*dev, color=PALETTE[1], linewidth=1.2)
            bottom.set_ylabel("loss − ref")
            bottom.set_xlabel("optimizer step")
            bottom.grid(True, linewidth=0.6)
        else:
            top.set_xlabel("optimizer step")
        top.set_ylabel("loss")
        top.grid(True, linewidth=0.6)
        top.legend(fontsize=8)
    return inline_svg(fig, name)


def _steps(values: Sequence[float]) -> tuple[range, list[float]]:
    """(steps, values) of a per-step series, 1-based; a step whose value is not finite is a gap (NaN), where an
    infinite loss would stretch the axis to no end."""
    return range(1, len(values) + 1), [v if math.isfinite(v) else math.nan for v in values]


def heatmap_plot(name: str, labels: Sequence[str], cells: Sequence[Sequence[float | None]], unit: str) -> str:
    """The pairwise matrix: rows send, columns receive; darker is slower, the diagonal blank."""
    n = len(labels)
    with styled():
        side = min(9.0, 2.4 + 0.32 * n)
        fig, ax = plt.subplots(figsize=(side + 1.2, side))
        values = [[v if v is not None and math.isfinite(v) else math.nan for v in row] for row in cells]
        image = ax.imshow(values, cmap="viridis", vmin=0, aspect="equal")
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=unit)
        ticks = range(n) if n <= 32 else range(0, n, max(1, n // 16))
        ax.set_xticks(list(ticks), [labels[i] for i in ticks], rotation=90, fontsize=7)
        ax.set_yticks(list(ticks), [labels[i] for i in ticks], fontsize=7)
        ax.set_xlabel("receiving rank")
        ax.set_ylabel("sending rank")
        if n <= 12:
            for i, row in enumerate(cells):
                for j, v in enumerate(row):
                    if v is not None and math.isfinite(v):
                        ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=7, color="white")
    return inline_svg(fig, name)


def phases_plot(name: str, labels: Sequence[str], phases: dict[str, Sequence[float]]) -> str:
    """One horizontal bar per rank (first at the top), its step's phases stacked in order: a straggler's bar is
    long in a compute phase, the others' are as long but in their wait."""
    n = len(labels)
    with styled():
        fig, ax = plt.subplots(figsize=(6.4, min(9.0, 1.0 + 0.32 * n)))
        rows = range(n)
        left = [0.0] * n
        for (phase, seconds), color in zip(phases.items(), PALETTE):
            width = [s if math.isfinite(s) else 0.0 for s in seconds]
            ax.barh(rows, width, left=left, color=color, label=phase, height=0.7)
            left = [a + b for a, b in zip(left, width)]
        ax.set_yticks(list(rows), labels, fontsize=7 if n > 12 else 8)
        ax.invert_yaxis()
        ax.set_xlabel("seconds per step")
        ax.grid(True, axis="x", linewidth=0.6)
        ax.set_axisbelow(True)
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(phases), fontsize=7, frameon=False)
    return inline_svg(fig, name)
