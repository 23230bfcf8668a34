"""The report's plots, drawn by matplotlib and inlined as SVG text.

Why matplotlib to static SVG rather than a bundled JavaScript plotting library: the
report must open offline, years later, from a mail attachment or a CI artifact. Inline
SVG needs no script, no network and no plugin; it stays sharp at any zoom, prints, and
its text is searchable. matplotlib is already the plotting tool of this field, renders
without a display through its Agg backend, and adds no bundled JS for anyone to audit
or update. The cost is no hover tooltips, so the tables beside each plot carry the
exact numbers.

Several SVGs share one HTML document and so one id namespace, while matplotlib numbers
its ids per figure (figure_1, clip paths, glyphs): every id in a plot, and every
reference to one, gets the plot's name as a prefix.
"""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import Sequence

import matplotlib

# No display on a cluster node or in CI; the backend must be chosen before pyplot loads.
matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

from clusterbench.units import human_bytes

PALETTE = ("#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#65a30d", "#475569")
_INK, _GRID, _MUTED = "#1f2937", "#e5e7eb", "#6b7280"
_STYLE = {
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


def _svg(fig: Figure, name: str) -> str:
    """The figure as an <svg> element (no XML prologue), with ids unique to this plot."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    svg = text[text.index("<svg"):]
    ids = set(re.findall(r'\bid="([^"]+)"', svg))
    svg = _ID_USES.sub(lambda m: f"{m[1]}{name}-{m[2]}" if m[2] in ids else m[0], svg)
    # A fixed pixel size would overflow narrow screens; the viewBox keeps the aspect ratio.
    svg = re.sub(r'<svg([^>]*?) width="[^"]+" height="[^"]+"', r"<svg\1", svg, count=1)
    return svg.replace("<svg", f'<svg class="plot" data-plot="{name}" role="img"', 1)


def _size_axis(ax: plt.Axes) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=4))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: human_bytes(v)))
    ax.set_xlabel("message size (Size column, bytes)")


def busbw_plot(
    name: str, series: dict[str, tuple[Sequence[int], Sequence[float]]],
    line_gbs: float | None = None, line_label: str = "",
) -> str:
    """busbw (GB/s) against size on log-log axes, one series per op, and the link line."""
    with plt.rc_context(_STYLE):
        fig, ax = plt.subplots(figsize=(6.4, 3.4))
        for (label, (sizes, gbs)), color in zip(series.items(), itertools.cycle(PALETTE)):
            positive = [(s, v) for s, v in zip(sizes, gbs) if v > 0]
            if positive:
                ax.plot(*zip(*positive), marker="o", markersize=3, linewidth=1.6, color=color, label=label)
        if line_gbs:
            ax.axhline(line_gbs, color=_INK, linestyle="--", linewidth=1, label=line_label)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        _size_axis(ax)
        ax.set_ylabel("busbw (GB/s)")
        ax.grid(True, which="major", linewidth=0.6)
        # busbw rises with size, so the lower right corner is the empty one.
        ax.legend(fontsize=8, loc="lower right", ncol=2 if len(series) > 4 else 1)
    return _svg(fig, name)


def loss_plot(name: str, losses: Sequence[float], reference: Sequence[float] | None) -> str:
    """The loss per step against the reference curve, and below it the deviation d = l - r."""
    steps = range(1, len(losses) + 1)
    with plt.rc_context(_STYLE):
        if not reference:
            fig, top = plt.subplots(figsize=(6.4, 3.0))
        else:
            fig, (top, bottom) = plt.subplots(
                2, 1, figsize=(6.4, 4.4), sharex=True, gridspec_kw={"height_ratios": [3, 1.3], "hspace": 0.08}
            )
        if reference:
            # Drawn first and lighter, so this run's line stays visible where the two agree.
            top.plot(range(1, len(reference) + 1), reference, color=_MUTED, linewidth=2.4, alpha=0.6,
                     label="reference")
        top.plot(steps, losses, color=PALETTE[0], linewidth=1.4, label="this run")
        if reference:
            n = min(len(losses), len(reference))
            dev = [losses[i] - reference[i] for i in range(n)]
            bottom.axhline(0, color=_MUTED, linewidth=0.8)
            bottom.fill_between(range(1, n + 1), dev, color=PALETTE[1], alpha=0.25, linewidth=0)
            bottom.plot(range(1, n + 1), dev, color=PALETTE[1], linewidth=1.2)
            bottom.set_ylabel("loss − ref")
            bottom.set_xlabel("optimizer step")
            bottom.grid(True, linewidth=0.6)
        else:
            top.set_xlabel("optimizer step")
        top.set_ylabel("loss")
        top.grid(True, linewidth=0.6)
        top.legend(fontsize=8)
    return _svg(fig, name)


def heatmap_plot(name: str, labels: Sequence[str], cells: Sequence[Sequence[float | None]], unit: str) -> str:
    """The pairwise matrix: rows send, columns receive; darker is slower, the diagonal blank."""
    n = len(labels)
    with plt.rc_context(_STYLE):
        side = min(9.0, 2.4 + 0.32 * n)
        fig, ax = plt.subplots(figsize=(side + 1.2, side))
        values = [[float("nan") if v is None else v for v in row] for row in cells]
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
                    if v is not None:
                        ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=7, color="white")
    return _svg(fig, name)
