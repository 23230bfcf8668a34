"""`clusterbench store import RUN_DIR...` records run folders made before (or away from) the store;
`clusterbench store info` says where the store is and what it holds."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from clusterbench.command import ToolCommand
from clusterbench.errors import EXIT_FAILED, EXIT_OK, UsageError, one_line
from clusterbench.publish import add_store_argument
from clusterbench.store import where as store_where

if TYPE_CHECKING:  # SQLAlchemy: loaded only when the store is opened
    from clusterbench.store.db import Store


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    imp = sub.add_parser("import", help="record run folders; a run already recorded is not recorded again",
                         description="record run folders; a run already recorded is not recorded again")
    imp.add_argument("runs", metavar="RUN_DIR", nargs="+", type=Path, help="run folders (or their run.json)")
    add_store_argument(imp, "import into")
    info = sub.add_parser("info", help="where the store is, its schema version and what it holds",
                          description="where the store is, its schema version and what it holds")
    add_store_argument(info, "describe")


def _where(args: argparse.Namespace) -> store_where.Where:
    where = store_where.resolve(args.store)
    if where is None:
        raise UsageError("--store off: there is no store to use")
    return where


def main(args: argparse.Namespace) -> int:
    from clusterbench.store.db import open_store  # SQLAlchemy: only in the commands that use the store

    where = _where(args)
    store = open_store(where, create=args.action == "import")
    try:
        return _import(store, args.runs) if args.action == "import" else _info(store)
    finally:
        store.close()


def _import(store: Store, runs: list[Path]) -> int:
    from clusterbench.recording import record_of  # every stage's metrics
    from clusterbench.results.folder import load_run

    recorded = present = 0
    skipped: list[str] = []
    for i, path in enumerate(runs, 1):
        folder = path.parent if path.name == "run.json" else path
        try:
            run = load_run(folder)
        except UsageError as e:
            skipped.append(f"{folder}: {one_line(e)}")
            continue
        if run.status == "running":  # its end is not known yet; import it once it has one
            skipped.append(f"{folder}: still running (or cut off without an ending); not recorded")
            continue
        if store.record(record_of(run, str(folder.absolute()))):
            recorded += 1
        else:
            present += 1
        if sys.stdout.isatty():
            print(f"\r# {i}/{len(runs)}", end="", flush=True)
    if sys.stdout.isatty():
        print()
    for line in skipped:
        print(f"# skipped {line}", file=sys.stderr)
    print(f"# store {store.where.shown}: {recorded} recorded, {present} already there, {len(skipped)} skipped")
    return EXIT_FAILED if skipped else EXIT_OK


def _info(store: Store) -> int:
    from clusterbench.store import history, schema

    with store.reading() as conn:
        s = history.summary(conn)
        version = schema.version(conn)
    print(f"store:    {store.where.shown}")
    print(f"schema:   version {version}")
    print(f"runs:     {s.runs}" + (f" ({s.first_utc} to {s.last_utc})" if s.runs else ""))
    print(f"nodes:    {s.nodes}")
    print(f"figures:  {s.figures}")
    for klass, n in s.classes:
        print(f"class:    {klass}: {n} node{'s' * (n != 1)}")
    return EXIT_OK


COMMAND = ToolCommand("store", "the results store: import run folders into it, or say what it holds",
                      add_arguments, main)
