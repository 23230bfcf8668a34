"""`clusterbench model fit RUN_DIR` and `clusterbench model predict`: the alpha-beta model (docs/methodology.md §14)."""

from __future__ import annotations

import argparse
from pathlib import Path

from clusterbench import argtypes
from clusterbench.errors import EXIT_OK, UsageError
from clusterbench.results.documents import write_text
from clusterbench.results.run import Run
from clusterbench.runtime.command import ToolCommand
from clusterbench.stages.comm.cost_model import STATS, bent, fit_run, span
from clusterbench.stages.comm.predict import (
    ALGORITHMS,
    Cluster,
    Link,
    Prediction,
    measured_links,
    named_link,
    named_links,
    powers_of_two,
    predict,
)
from clusterbench.stages.comm.records import COST_MODEL, CostModel
from clusterbench.stages.registry import load_run, run_folder
from clusterbench.units import duration, human_bytes

PLANNING_SIZE = 1024**3  # the planning question's message: 1 GiB


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True)
    fit = sub.add_parser("fit", help="fit alpha and beta per op and link class to a run's comm rows")
    fit.add_argument("run_dir", metavar="RUN_DIR")
    fit.add_argument("--save", action="store_true", help="store the fit in the run's run.json (section model)")
    fit.add_argument("--sizes", metavar="LOW..HIGH", help="fit only the rows of these sizes (e.g. 1K..1M; default all)")
    fit.add_argument("--overwrite", action="store_true",
                     help="with --save: replace a stored fit made another way (other sizes or --stat)")
    _add_stat(fit)
    pre = sub.add_parser("predict", help="predict collective times for a described cluster, per algorithm")
    pre.add_argument("--from", dest="from_run", metavar="RUN_DIR", help="link classes as fitted to this run")
    pre.add_argument("--intra", metavar="CLASS", help=f"intra-node link class: {', '.join(named_links())}")
    pre.add_argument("--inter", metavar="CLASS", help="inter-node link class (e.g. ndr)")
    pre.add_argument("--nodes", type=argtypes.whole(1), required=True, help="nodes of the cluster")
    pre.add_argument("--gpus-per-node", type=argtypes.whole(1),
                     help="ranks per node (default with --from: the run's)")
    pre.add_argument("--op", default="all_reduce", help=f"one of {', '.join(ALGORITHMS)} (default %(default)s)")
    pre.add_argument("--sizes", default="1K..16G", help="LOW..HIGH, powers of two between (default %(default)s)")
    pre.add_argument("--plot", metavar="FILE.svg", type=Path, help="also draw the predicted busbw curves (a new file)")
    pre.add_argument("--overwrite", action="store_true", help="replace the --plot file when it exists")
    _add_stat(pre)


def _add_stat(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stat", choices=STATS, default="p50",
                   help="the time of each row to fit: p50 of the calls (default), their mean or fastest")


def main(args: argparse.Namespace) -> int:
    return _fit(args) if args.action == "fit" else _predict(args)


def _fit(args: argparse.Namespace) -> int:
    folder = run_folder(args.run_dir)
    run = folder.load()
    sizes = _range(args.sizes) if args.sizes is not None else None  # "--sizes=" is a typo, not "all"
    if args.save and not args.overwrite:
        _keeps_stored_fit(run, args.stat, sizes, Path(args.run_dir))
    model = fit_run(run, args.stat, sizes)
    print(fit_text(model))
    for reason in bent(model):
        print(f"# not one line: {reason}")
    if args.save:
        COST_MODEL.set(run, model)
        print(f"# model: stored in {folder.save(run)}")
    return EXIT_OK


def _keeps_stored_fit(run: Run, stat: str, sizes: tuple[int, int] | None, run_dir: Path) -> None:
    """--save replaces a stored fit only when it was made the same way (the same rows and statistic give
    the same figures), or when --overwrite asks: a fit of chosen sizes is not lost to a default one."""
    stored = COST_MODEL.of(run)
    if stored is None:
        return
    was = (stored.stat, tuple(stored.size_range) if stored.size_range else None)
    if was != (stat, sizes):
        raise UsageError(f"{run_dir} already holds a fit of {_how(*was)}: add --overwrite to replace it with this "
                         f"fit of {_how(stat, sizes)}, or leave out --save")


def _how(stat: str, sizes: tuple[int, int] | None) -> str:
    return f"the {stat} times of {span(sizes) if sizes else 'all sizes'}"


def fit_text(model: CostModel) -> str:
    checks = {(v.op, v.link): v for v in model.validation}
    within = f", sizes {span(model.size_range)}" if model.size_range else ""
    lines = [f"# alpha-beta fit of each row's {model.stat} time{within}: t(S) = alpha + beta * S",
             f"{'op':<15} {'link':<5} {'ranks':>5} {'alpha':>11} {'beta us/B':>11} {'link GB/s':>10} "
             f"{'R2 (log)':>8} {'points':>6} {'holdout err med/max':>20}"]
    for f in model.fits:
        v = checks.get((f.op, f.link))
        held = f"{v.median_error:.1%} / {v.max_error:.1%}" if v else "-"
        gbs = f"{f.bandwidth_gb_s:.3f}" if f.bandwidth_gb_s else "-"
        lines.append(f"{f.op:<15} {f.link:<5} {f.world_size:>5} {duration(f.alpha_us):>11} "
                     f"{f.beta_us_per_byte:>11.3e} {gbs:>10} {f.r2:>8.3f} {f.points:>6} {held:>20}")
    for p in model.links:
        lines.append(f"# {p.link}-node link: {duration(p.alpha_us)} per step, {p.bandwidth_gb_s:.3f} GB/s "
                     f"(from {p.source} through the ring's steps and bytes)")
    return "\n".join(lines)


def cluster_of(args: argparse.Namespace) -> Cluster:
    links: dict[str, Link] = {}
    gpus = args.gpus_per_node
    if args.from_run:
        run = load_run(args.from_run)
        links = measured_links(COST_MODEL.of(run) if COST_MODEL.of(run) and COST_MODEL.of(run).stat == args.stat
                                  else fit_run(run, args.stat))
        per_node: dict[str, int] = {}
        for placement in run.env.ranks:
            per_node[placement.node] = per_node.get(placement.node, 0) + 1
        gpus = gpus if gpus is not None else max(per_node.values(), default=run.env.world_size or 1)
    for key in ("intra", "inter"):
        if getattr(args, key):
            links[key] = named_link(getattr(args, key))
    if "intra" not in links:
        raise UsageError("no intra-node link class: give --from RUN_DIR (measured on one node) or --intra CLASS")
    if gpus is None:
        raise UsageError("give --gpus-per-node (ranks per node) with named link classes")
    return Cluster(args.nodes, gpus, links["intra"], links.get("inter"))


def _range(text: str) -> tuple[int, int]:
    """--sizes LOW..HIGH (or one size) in bytes."""
    low, sep, high = text.partition("..")
    try:
        bounds = argtypes.size(low), argtypes.size(high if sep else low)
    except argparse.ArgumentTypeError as e:
        raise UsageError(f"--sizes {text}: {e}") from None
    if bounds[1] < bounds[0]:
        raise UsageError(f"--sizes {text}: the high end is below the low one")
    return bounds


def _sizes(text: str) -> list[int]:
    return powers_of_two(*_range(text))


def _predict(args: argparse.Namespace) -> int:
    cluster = cluster_of(args)
    predictions = predict(cluster, args.op, _sizes(args.sizes))
    print(predict_text(cluster, args.op, predictions))
    print(planning_answer(cluster, args.op))
    if args.plot:
        from clusterbench.stages.comm.cost_model_report import prediction_svg  # matplotlib only when asked for

        path = write_text(args.plot, prediction_svg(cluster, args.op, predictions), "the plot")
        print(f"# plot: {path}")
    return EXIT_OK


def describe(cluster: Cluster) -> str:
    text = (f"{cluster.nodes} node{'s' * (cluster.nodes > 1)} x {cluster.gpus_per_node} ranks; intra "
            f"{cluster.intra.name}: {cluster.intra.alpha_us:.3g} us/step, {cluster.intra.bandwidth_gb_s:.4g} GB/s")
    if cluster.nodes > 1 and cluster.inter:
        text += (f"; inter {cluster.inter.name}: {cluster.inter.alpha_us:.3g} us/step, "
                 f"{cluster.inter.bandwidth_gb_s:.4g} GB/s")
    return text


def predict_text(cluster: Cluster, op: str, predictions: list[Prediction]) -> str:
    names = [p.algorithm for p in predictions[0].points]
    head = f"{'size':>10}" + "".join(f" {n + ' time':>18} {'busbw GB/s':>11}" for n in names) + "  winner"
    lines = [f"# {op} predicted on {describe(cluster)}", head]
    for row in predictions:
        cells = "".join(f" {duration(p.time_us):>18} {p.busbw_gb_s:>11.4g}" for p in row.points)
        lines.append(f"{human_bytes(row.size_bytes):>10}{cells}  {row.winner.algorithm}")
    return "\n".join(lines)


def planning_answer(cluster: Cluster, op: str) -> str:
    best = predict(cluster, op, [PLANNING_SIZE])[0].winner
    return (f"# {op} of {human_bytes(PLANNING_SIZE)} on {cluster.nodes} node{'s' * (cluster.nodes > 1)} x "
            f"{cluster.gpus_per_node} ranks: {duration(best.time_us)} ({best.algorithm}, busbw "
            f"{best.busbw_gb_s:.4g} GB/s)")


COMMAND = ToolCommand("model", "fit the alpha-beta model to a run, or predict a cluster's collectives with it",
                      add_arguments, main)
