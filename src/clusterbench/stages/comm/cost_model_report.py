"""The report's alpha-beta model section, and the plot of a prediction (docs/methodology.md §14)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, LogLocator

from clusterbench.report.blocks import esc, note, num, pct, section, table
from clusterbench.report.plots import PAIR_SIZE, PALETTE, drawable, inline_svg, styled
from clusterbench.results.run import Run
from clusterbench.stages.comm.cost_model import bent, groups, row_time, span
from clusterbench.stages.comm.predict import (
    ALGORITHMS,
    Cluster,
    Prediction,
    measured_links,
    named_link,
    powers_of_two,
    predict,
)
from clusterbench.stages.comm.records import COST_MODEL, CostModel
from clusterbench.units import duration, human_bytes

TARGET_NODES = 16  # the report's what-if: this many nodes like the measured one
_PLANNING_SIZE = 1024**3


def plot_count(run: Run) -> int:
    """One plot per fitted op, and the target cluster's prediction when an intra-node link was derived."""
    if COST_MODEL.of(run) is None:
        return 0
    return len({f.op for f in COST_MODEL.of(run).fits}) + any(p.link == "intra" for p in COST_MODEL.of(run).links)


def cost_model_section(run: Run) -> str:
    model = COST_MODEL.of(run)
    assert model is not None
    checks = {(v.op, v.link): v for v in model.validation}
    rows = []
    for f in model.fits:
        v = checks.get((f.op, f.link))
        rows.append([f.op, f.link, str(f.world_size), duration(f.alpha_us), f"{f.beta_us_per_byte:.3e}",
                     num(f.bandwidth_gb_s), num(f.r2), str(f.points),
                     f"{pct(v.median_error)} / {pct(v.max_error)}" if v else "-"])
    body = table(["op", "link", "ranks", "alpha", "beta (µs/B)", "link GB/s", "R² (log t)", "points",
                  "held-out error median / max"], rows, numeric_from=2)
    body += "".join(note(esc(f"Not one line: {reason}.")) for reason in bent(model))
    body += "".join(note(esc(f"{p.link}-node link: {duration(p.alpha_us)} per step, {p.bandwidth_gb_s:.4g} GB/s, "
                             f"from {p.source} through the ring's steps and bytes"))
                    for p in model.links)
    body += "".join(_fit_plot(run, model, op) for op in dict.fromkeys(f.op for f in model.fits))
    target = target_cluster(run, model)
    if target is not None:
        cluster, assumed = target
        predictions = predict(cluster, "all_reduce", powers_of_two(1024, 16 * 1024**3))
        best = predict(cluster, "all_reduce", [_PLANNING_SIZE])[0].winner
        body += note(esc(f"Target: {cluster.nodes} nodes like this one ({cluster.gpus_per_node} ranks each)"
                         f"{assumed}. all_reduce of 1 GiB: {duration(best.time_us)} by {best.algorithm}, "
                         f"busbw {best.busbw_gb_s:.4g} GB/s."))
        body += prediction_svg(cluster, "all_reduce", predictions, name="model-target")
    within = f" (sizes {span(model.size_range)})" if model.size_range else ""
    lead = (f"t(S) = alpha + beta·S fitted to each row's {model.stat} time{within}, per op and link class, on relative "
            "error with robust weights; the held-out error is that of a fit on every other size predicting "
            "the sizes between (docs/methodology.md §14).")
    return section("model", "Alpha-beta model", body, lead=lead)


def target_cluster(run: Run, model: CostModel) -> tuple[Cluster, str] | None:
    """TARGET_NODES nodes like the measured one; their network is the measured one, else NDR (assumed)."""
    links = measured_links(model)
    if "intra" not in links:
        return None
    per_node: dict[str, int] = {}
    for p in run.env.ranks:
        per_node[p.node] = per_node.get(p.node, 0) + 1
    gpus = max(per_node.values(), default=run.env.world_size or 1)
    inter, assumed = links.get("inter"), ""
    if inter is None:
        inter, assumed = named_link("ndr"), ", joined by InfiniBand NDR (assumed: no inter-node link was measured)"
    return Cluster(TARGET_NODES, gpus, links["intra"], inter), assumed


def _fit_plot(run: Run, model: CostModel, op: str) -> str:
    """Measured points, the fitted line and, where the model has the op, each algorithm on the measured shape."""
    links = measured_links(model)
    with styled():
        fig, ax = plt.subplots(figsize=PAIR_SIZE)
        colors = iter(PALETTE)
        for (row_op, link, n), rows in sorted(groups(run).items()):
            fit = next((f for f in model.fits if (f.op, f.link, f.world_size) == (row_op, link, n)), None)
            if row_op != op or fit is None:
                continue
            color = next(colors)
            sizes = sorted({r.size_bytes for r in rows})
            _plot(ax, [r.size_bytes for r in rows], [row_time(r, model.stat) for r in rows], "o", markersize=3,
                  color=color, label=f"{link}, {n} ranks: measured")
            _plot(ax, sizes, [fit.alpha_us + fit.beta_us_per_byte * s for s in sizes], color=color, linewidth=1.4,
                  label="fit")
            nodes = max(r.nodes for r in rows) if link == "inter" else 1
            if op in ALGORITHMS and "intra" in links and (nodes == 1 or "inter" in links) and n % nodes == 0:
                shape = Cluster(nodes, n // nodes, links["intra"], links.get("inter"))
                for (name, time), style in zip(ALGORITHMS[op].items(), (":", "--", "-.")):
                    _plot(ax, sizes, [time(shape, s) for s in sizes], style, color=color, linewidth=1,
                          label=f"model: {name}")
        _axes(ax, "time per call (µs)")
        ax.set_title(op)
    return inline_svg(fig, f"model-{op}")


def prediction_svg(cluster: Cluster, op: str, predictions: Sequence[Prediction], name: str = "model") -> str:
    """Predicted busbw per algorithm against size; the winner at each size is ringed."""
    with styled():
        fig, ax = plt.subplots(figsize=PAIR_SIZE)
        sizes = [p.size_bytes for p in predictions]
        for i, algo in enumerate(pt.algorithm for pt in predictions[0].points):
            values = [next(pt.busbw_gb_s for pt in p.points if pt.algorithm == algo) for p in predictions]
            color = PALETTE[i % len(PALETTE)]
            _plot(ax, sizes, values, color=color, linewidth=1.4, label=algo)
            wins = [(p.size_bytes, p.winner.busbw_gb_s) for p in predictions if p.winner.algorithm == algo]
            if wins:
                _plot(ax, *zip(*wins), "o", markersize=4, color=color, markerfacecolor="none")
        _axes(ax, "predicted busbw (GB/s)")
        ax.set_title(f"{op}: {cluster.nodes} nodes x {cluster.gpus_per_node} (ringed: fastest)")
    return inline_svg(fig, name)


def _plot(ax: plt.Axes, xs: Sequence[float], ys: Sequence[float], *style: str, **kwargs: object) -> None:
    """A series on log-log axes, its points that cannot be drawn there (NaN, infinite, zero) left out."""
    points = drawable(xs, ys, log=True)
    if points:
        ax.plot(*zip(*points), *style, **kwargs)


def _axes(ax: plt.Axes, label: str) -> None:
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=4, numticks=6))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: human_bytes(v)))
    ax.set_xlabel("message size (Size column, bytes)")
    ax.set_ylabel(label)
    ax.grid(True, which="major", linewidth=0.6)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")
