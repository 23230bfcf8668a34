"""The burn-in section: each figure of every device against the soak's time, with where a drift began, then the
findings with their actions and the first wrong words of the memory test (docs/burnin.md)."""

from __future__ import annotations

import itertools

import matplotlib.pyplot as plt

from clusterbench.report.blocks import Part, card, cards, details, esc, note, num, section, table
from clusterbench.report.plots import PALETTE, drawable, inline_svg, styled
from clusterbench.results.findings import Finding
from clusterbench.results.run import Run
from clusterbench.stages.burnin.metrics import (
    FIGURES,
    Drift,
    drifts,
    expected_windows,
    judged,
    measured,
    partial,
    series,
    subject,
    wrong_words,
)
from clusterbench.stages.burnin.records import Burnin, Window
from clusterbench.units import human_bytes

_BADGE = {"critical": "fail", "warning": "warn", "info": "info"}
_LEGEND_MAX = 12  # more devices than this: the lines stay, the legend would bury the plot


def _drawn(b: Burnin) -> list[tuple[str, str]]:
    """The figures some window holds: (field, words)."""
    return [(figure, words) for figure, words, _ in FIGURES
            if any(getattr(w, figure) is not None for w in b.windows)]


def soak_parts(run: Run) -> list[Part]:
    """The burn-in's section of a report, where the run soaked (`burnin`, or `fleet --burnin`)."""
    found = judged(run)
    return [] if found is None else [Part("burnin", "Burn-in", burnin_section(found), plot_count(found))]


def plot_count(b: Burnin) -> int:
    return len(_drawn(b))


def burnin_section(b: Burnin) -> str:
    """The section of a concluded soak (metrics.judged)."""
    by = series(b.windows)
    found = b.findings
    wrong = wrong_words(b)
    body = cards([
        card("soak", f"{num(b.elapsed_s, 3)} s", f"of {num(b.duration_s, 4)} s asked" + (f" ({esc(b.level)})"
                                                                                        if b.level else "")),
        card("windows", str(min((measured(rows) for rows in by.values()), default=0)),
             f"of {expected_windows(b)}, {num(b.window_s, 3)} s each, per device"),
        card("devices", str(len(by))),
        card("wrong words", str(wrong), f"in {esc(human_bytes(b.memory_bytes))} per device"),
    ])
    if partial(b):
        body += note("The soak was cut short: judged on the windows it measured, and never passed.", "fail")
    spans = max((w.spans for w in b.windows), default=1)
    if spans > 1:
        body += note(f"Each point stands for {spans} windows merged (run.json keeps a long soak's series thinned); "
                     "burnin.csv holds every window.")
    fell = drifts(b)
    plots = [_plot(b, by, figure, words, [d for d in fell if d.figure == figure]) for figure, words in _drawn(b)]
    for pair in itertools.zip_longest(*[iter(plots)] * 2, fillvalue=""):
        body += f'<div class="op"><div>{pair[0]}</div><div>{pair[1]}</div></div>'
    body += "<h3>Findings</h3>" + (_findings(found) if found else note("Nothing found."))
    if b.wrong:
        rows = [[str(w.rank), esc(w.device), num(w.t_s, 4), f"0x{w.offset:x}", esc(w.wrote), esc(w.read)]
                for w in b.wrong]
        body += details(f"Wrong words ({len(b.wrong)} kept of {wrong})",
                        table(["rank", "device", "at s", "byte offset", "wrote", "read"], rows, numeric_from=2))
    lead = (f"Every device under sustained load, window by window: dense matmul, a memory test over a region "
            f"allocated once, an all_reduce among all ranks, and a deterministic computation compared bit for bit. "
            f"A figure drifts when it falls by more than {b.tolerance:.0%} and stays down (docs/burnin.md).")
    return section("burnin", "Burn-in", body, lead=lead)


def _findings(found: list[Finding]) -> str:
    rows = [[f'<span class="badge {_BADGE[f.severity]}">{esc(f.severity)}</span>', esc(f.subject), esc(f.what),
             esc(f.action)] for f in found]
    return table(["severity", "subject", "finding", "action"], rows, numeric_from=4)


def _plot(b: Burnin, by: dict[int, list[Window]], figure: str, words: str, fell: list[Drift]) -> str:
    """One figure against time, a line per device (the busbw once: every rank holds the job's), each drift's
    start a dashed line, a steady decline its fitted line."""
    if figure == "busbw_gbps":
        by = dict(itertools.islice(by.items(), 1))
    nodes = {w.node for w in b.windows}
    colors = dict(zip(by, itertools.cycle(PALETTE[:-1])))
    with styled():
        fig, ax = plt.subplots(figsize=(6.4, 2.8))
        for rank, rows in by.items():
            first = rows[0]
            label = ("all_reduce" if figure == "busbw_gbps" else
                     f"rank {rank} {first.device}" + (f" on {first.node}" if len(nodes) > 1 else ""))
            shown = drawable([w.t_s for w in rows if getattr(w, figure) is not None],
                             [getattr(w, figure) for w in rows if getattr(w, figure) is not None])
            if shown:
                ax.plot(*zip(*shown), marker="o", markersize=2.5, linewidth=1.2, color=colors[rank], label=label)
        for d in fell:
            color = next((colors[r] for r, rows in by.items() if subject(rows[0]) == d.subject), PALETTE[-1])
            if d.shape == "step":
                ax.axvline(d.start_s, color=color, linestyle="--", linewidth=1)
            else:
                ax.plot([d.start_s, d.end_s], [d.before, d.after], color=color, linestyle="--", linewidth=1)
        ax.set_xlabel("seconds since the soak began")
        ax.set_ylabel(words)
        ax.set_ylim(bottom=0)
        ax.grid(True, axis="y", linewidth=0.6)
        if 1 < len(by) <= _LEGEND_MAX and ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=min(6, len(by)))
    return inline_svg(fig, f"burnin-{figure}")
