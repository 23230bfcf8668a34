"""`clusterbench baseline RUN_DIR... -o FILE`: several runs summarised into one baseline;
`clusterbench baseline --from-store --since 30d -o FILE`: one from the results store's healthy past."""

from __future__ import annotations

import argparse
import time

from clusterbench import argtypes
from clusterbench.analyse import baseline
from clusterbench.errors import EXIT_OK, UsageError
from clusterbench.nodechecks import bands
from clusterbench.publish import add_store_argument
from clusterbench.results import codec
from clusterbench.results.documents import Band, Baseline
from clusterbench.runtime.command import ToolCommand
from clusterbench.stages.registry import load_run, metrics_of
from clusterbench.store.where import resolve

SINCE = "30d"  # how far back --from-store reads unless told


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", metavar="RUN_DIR", nargs="*", help="run folders to summarise")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="baseline JSON to write (a new file)")
    p.add_argument("--overwrite", action="store_true", help="replace FILE when it exists")
    g = p.add_argument_group("from the results store")
    g.add_argument("--from-store", dest="from_store", action="store_true",
                   help="summarise the store's healthy runs and nodes of one hardware class instead of run folders")
    add_store_argument(g, "read")
    g.add_argument("--since", type=argtypes.age, metavar="PERIOD", help=f"only runs this recent (default {SINCE})")
    g.add_argument("--class", dest="klass", metavar="CLASS",
                   help="the hardware class (default: the store's only one)")


def main(args: argparse.Namespace) -> int:
    if args.from_store == bool(args.runs):
        raise UsageError("give run folders, or --from-store, and not both")
    if not args.from_store and (args.since or args.klass or args.store):
        raise UsageError("--since, --class and --store choose what --from-store reads: add --from-store")
    output = args.output  # checked with every output before the command began (results/outputs.py)
    if args.from_store:
        doc, thin = _from_store(args)
        what = f"{len(doc.runs)} healthy runs of {doc.klass}, {len(doc.bands)} node bands" + _left_out(thin)
    else:
        doc = baseline.build([(str(run), metrics_of(load_run(run)).values) for run in args.runs])
        what = f"{len(args.runs)} runs"
    path = baseline.write(doc, output)
    print(f"# baseline: {len(doc.metrics)} metrics over {what} -> {path}")
    return EXIT_OK


def _from_store(args: argparse.Namespace) -> tuple[Baseline, list[Band]]:
    from clusterbench.analyse import history
    from clusterbench.store import queries
    where = resolve(args.store)
    if where is None:
        raise UsageError("--store off: there is no store to read")
    from clusterbench.store.db import open_store  # SQLAlchemy: only where a sound store is read

    since = args.since or argtypes.age(SINCE)
    since_s = time.time() - since
    store = open_store(where, write=False)
    try:
        with store.reading() as conn:
            klass = _class(args.klass, queries.classes(conn))
            stats = queries.healthy_stats(conn, klass, since_s)
            values = queries.healthy_values(conn, klass, since_s, history.band_metrics())
    finally:
        store.close()
    source = f"store {where.shown}, {since / 86400:g} days to {time.strftime('%Y-%m-%d', time.gmtime())}"
    doc, thin = history.baseline(stats, values, klass, source)
    if not doc.runs:
        raise UsageError(f"store {where.shown}: no healthy run of {klass} in the last {since / 86400:g} days")
    try:  # what clusterbench writes, clusterbench reads back: never a null where a figure belongs
        codec.load(Baseline, codec.dump(doc))
    except codec.SchemaError as e:
        raise UsageError(f"store {where.shown}: its figures of {klass} make no baseline ({e})") from None
    return doc, thin


def _left_out(thin: list[Band]) -> str:
    """The bands left out, in words: too few nodes to judge anyone by."""
    if not thin:
        return ""
    named = ", ".join(f"{b.metric} ({b.nodes} node{'s' * (b.nodes != 1)})" for b in thin)
    return f" (left out: {named}; a band judges from {bands.JUDGES_FROM} nodes)"


def _class(asked: str | None, classes: list[str]) -> str:
    known = [k for k in classes if k != "?"]
    if asked is not None:
        if asked not in known:
            raise UsageError(f"--class {asked!r}: the store knows {', '.join(map(repr, known)) or 'no class'}")
        return asked
    if len(known) != 1:
        raise UsageError("the store holds " + (f"several hardware classes ({', '.join(map(repr, known))}): "
                                               "choose one with --class" if known else "no run yet"))
    return known[0]


COMMAND = ToolCommand("baseline", "summarise several runs, or the results store's healthy past, into a baseline JSON",
                      add_arguments, main)
