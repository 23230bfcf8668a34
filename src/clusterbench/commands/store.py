"""`clusterbench store import RUN_DIR...` records run folders made before (or away from) the store;
`clusterbench store info` says where the store is and what it holds (reading it read-only);
`clusterbench store upgrade` brings an older store up to this version's schema, which no reader does."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from clusterbench.errors import EXIT_FAILED, EXIT_OK, UsageError, one_line
from clusterbench.inputs.printable import printable
from clusterbench.publish import add_store_argument
from clusterbench.runtime.command import ToolCommand
from clusterbench.store.where import Where, resolve

if TYPE_CHECKING:  # SQLAlchemy: loaded only when the store is opened
    from clusterbench.store.db import Store
    from clusterbench.store.record import RunRecord


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    imp = sub.add_parser("import", help="record run folders; a run already recorded is not recorded again",
                         description="record run folders; a run already recorded is not recorded again")
    imp.add_argument("runs", metavar="RUN_DIR", nargs="+", type=Path, help="run folders (or their run.json)")
    add_store_argument(imp, "import into")
    info = sub.add_parser("info", help="where the store is, its schema version and what it holds",
                          description="where the store is, its schema version and what it holds")
    add_store_argument(info, "describe")
    upgrade = sub.add_parser("upgrade", help="bring the store up to this clusterbench's schema",
                             description="bring the store up to this clusterbench's schema (reading never does)")
    add_store_argument(upgrade, "upgrade")


def _where(args: argparse.Namespace) -> Where:
    where = resolve(args.store)
    if where is None:
        raise UsageError("--store off: there is no store to use")
    return where


def main(args: argparse.Namespace) -> int:
    where = _where(args)
    if args.action == "upgrade":
        return _upgrade(where)
    from clusterbench.store.db import open_store  # SQLAlchemy: only once the store named is sound

    store = open_store(where, write=args.action == "import")
    try:
        return _import(store, args.runs) if args.action == "import" else _info(store)
    finally:
        store.close()


# Runs recorded in one transaction: a commit (and its sync to disk) per run is what made thousands slow.
BATCH = 200


def _import(store: Store, runs: list[Path]) -> int:
    from clusterbench.publish.recording import record_of  # every stage's metrics
    from clusterbench.stages.registry import load_run
    from clusterbench.store.fit import refusal

    recorded = present = 0
    skipped: list[str] = []
    batch: list[RunRecord] = []
    progress = _Progress(len(runs))
    for i, path in enumerate(runs, 1):
        folder = path.parent if path.name == "run.json" else path
        shown = printable(str(folder))  # a name may hold a tab, a newline, a byte that is no UTF-8
        try:
            run = load_run(folder)
        except UsageError as e:
            skipped.append(f"{shown}: {printable(one_line(e))}")
        else:
            # A run still running is imported once its end is known; what the store's readers would refuse, never.
            record = None if run.status == "running" else record_of(run, str(folder.absolute()))
            why = "still running (or cut off without an ending)" if record is None else refusal(record)
            if why is not None:
                skipped.append(f"{shown}: {why}; not recorded")
            else:
                batch.append(record)
        progress.folder(i)
        if len(batch) == BATCH or i == len(runs):
            new = store.record_many(batch) if batch else []
            recorded += sum(new)
            present += len(new) - sum(new)
            batch = []
            progress.batch(i, recorded, present, len(skipped))
    progress.end()
    for line in skipped:
        print(f"# skipped {line}", file=sys.stderr)
    print(f"# store {store.where.shown}: {recorded} recorded, {present} already there, {len(skipped)} skipped")
    return EXIT_FAILED if skipped else EXIT_OK


class _Progress:
    """How far an import is: a counter rewritten in place on a terminal; elsewhere (a log, a pipe) a line per
    batch, and none for an import of one batch, whose summary line says it all."""

    def __init__(self, total: int) -> None:
        self.total, self.tty = total, sys.stdout.isatty()

    def folder(self, done: int) -> None:
        if self.tty:
            print(f"\r# {done}/{self.total}", end="", flush=True)

    def batch(self, done: int, recorded: int, present: int, skipped: int) -> None:
        if not self.tty and self.total > BATCH:
            print(f"# {done}/{self.total} read: {recorded} recorded, {present} already there, {skipped} skipped",
                  flush=True)

    def end(self) -> None:
        if self.tty:
            print()


def _upgrade(where: Where) -> int:
    from clusterbench.store import schema
    from clusterbench.store.db import open_store

    if where.path is not None and not where.path.exists():
        raise UsageError(f"store {where.shown}: no such file to upgrade")
    store = open_store(where)  # a writer: brings the schema up to this version
    try:
        with store.reading() as conn:
            version = schema.version(conn)
    finally:
        store.close()
    print(f"# store {where.shown}: schema version {version}")
    return EXIT_OK


def _info(store: Store) -> int:
    from clusterbench.store import queries, schema

    with store.reading() as conn:
        s = queries.summary(conn)
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
