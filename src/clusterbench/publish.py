"""Where a finished run goes besides its folder: the results store, a Prometheus textfile, a
Pushgateway. A run never depends on them: each failure is one line on stderr, and the run's folder,
verdict and exit code stay as they were."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

from clusterbench.errors import UsageError, one_line
from clusterbench.store import where as store_where
from clusterbench.store.record import RunRecord, started_s

TEXTFILE_SUFFIX = ".prom"  # the only files node_exporter's textfile collector reads


@dataclass(frozen=True)
class Outputs:
    store: store_where.Where | None = None
    textfile: Path | None = None
    pushgateway: str | None = None


def add_store_argument(p: argparse.ArgumentParser | argparse._ArgumentGroup, doing: str = "record the run in") -> None:
    p.add_argument("--store", metavar="PATH|URL",
                   help=f"{doing} this results store: an SQLite file, postgresql://USER:PASSWORD@HOST/DB, "
                        f"or off (default: ${store_where.ENV}, else results.db in your data directory)")


def add_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    add_store_argument(p)
    p.add_argument("--metrics-textfile", dest="metrics_textfile", type=Path, metavar="FILE.prom",
                   help="write the figures as Prometheus text for node_exporter's textfile collector")
    p.add_argument("--pushgateway", metavar="URL", help="push the figures to this Prometheus Pushgateway")


def outputs_of(args: argparse.Namespace) -> Outputs:
    """The outputs asked for, checked before anything is measured."""
    store = store_where.resolve(getattr(args, "store", None))
    textfile = getattr(args, "metrics_textfile", None)
    if textfile is not None:
        if textfile.suffix != TEXTFILE_SUFFIX:
            raise UsageError(f"--metrics-textfile {textfile}: node_exporter reads only *{TEXTFILE_SUFFIX} files; "
                             f"name it {textfile.with_suffix(TEXTFILE_SUFFIX).name}")
        if not textfile.absolute().parent.is_dir():
            raise UsageError(f"--metrics-textfile {textfile}: no such folder {textfile.absolute().parent}")
        if textfile.is_dir():
            raise UsageError(f"--metrics-textfile {textfile}: is a folder")
    gateway = getattr(args, "pushgateway", None)
    if gateway is not None:
        parts = urlsplit(gateway if "://" in gateway else f"http://{gateway}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"--pushgateway {gateway}: give the gateway's http://HOST:PORT")
        gateway = parts.geturl()
    return Outputs(store, textfile, gateway)


def publish(record: RunRecord, outputs: Outputs, say: TextIO | None = sys.stdout) -> bool:
    """Record the run and export its figures; False when any of it failed (said on stderr).
    say: where to tell what was done (None: nothing, for a command whose output is one line)."""
    ok = True
    if outputs.store is not None:
        ok &= _attempt(lambda: _record(record, outputs.store, say), "store", outputs.store.shown)
    if outputs.textfile is None and outputs.pushgateway is None:
        return ok
    from clusterbench import prometheus  # prometheus_client: only where figures are exported

    registry = prometheus.registry_of(record, started_s(record.started_utc))
    if outputs.textfile is not None:
        ok &= _attempt(lambda: prometheus.write_textfile(outputs.textfile, registry), "--metrics-textfile",
                       str(outputs.textfile))
    if outputs.pushgateway is not None:
        ok &= _attempt(lambda: prometheus.push(outputs.pushgateway, registry, record.host), "--pushgateway",
                       outputs.pushgateway)
    return ok


def _record(record: RunRecord, where: store_where.Where, say: TextIO | None) -> None:
    from clusterbench.store.db import open_store  # SQLAlchemy: only where a run is recorded

    store = open_store(where)
    try:
        new = store.record(record)
    finally:
        store.close()
    if say is not None:
        print(f"# store: {'recorded in' if new else 'already in'} {where.shown}", file=say, flush=True)


def _attempt(action: Callable[[], None], what: str, target: str) -> bool:
    try:
        action()
    except Exception as e:  # noqa: BLE001 - whatever it is, the run it would record is not lost
        text = one_line(e).removeprefix(f"store {target}: ")
        print(f"clusterbench: {what} {target}: {text} (the run's own results are kept)", file=sys.stderr, flush=True)
        return False
    return True
