"""Where a finished run goes besides its folder: the results store, a Prometheus textfile, a
Pushgateway. A run never depends on them: each failure is one line on stderr, and the run's folder,
verdict and exit code stay as they were."""

from __future__ import annotations

import argparse
import ipaddress
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

from clusterbench.argtypes import clipped
from clusterbench.errors import UsageError, one_line
from clusterbench.secrets import masked
from clusterbench.store.record import RunRecord, started_s
from clusterbench.store.where import ENV, Where, resolve

TEXTFILE_SUFFIX = ".prom"  # the only files node_exporter's textfile collector reads
# A host name as DNS has them (labels of letters, digits, hyphens; underscores, which container names use).
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?"
_HOST_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")


@dataclass(frozen=True)
class Outputs:
    store: Where | None = None
    textfile: Path | None = None
    pushgateway: str | None = None


def add_store_argument(p: argparse.ArgumentParser | argparse._ArgumentGroup, doing: str = "record the run in") -> None:
    p.add_argument("--store", metavar="PATH|URL",
                   help=f"{doing} this results store: an SQLite file, postgresql://USER:PASSWORD@HOST/DB, "
                        f"or off (default: ${ENV}, else results.db in your data directory)")


def add_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    add_store_argument(p)
    p.add_argument("--metrics-textfile", dest="metrics_textfile", type=Path, metavar="FILE.prom",
                   help="write the figures as Prometheus text for node_exporter's textfile collector")
    p.add_argument("--pushgateway", metavar="URL", help="push the figures to this Prometheus Pushgateway")


def outputs_of(args: argparse.Namespace) -> Outputs:
    """The outputs asked for, checked before anything is measured."""
    store = resolve(getattr(args, "store", None))
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
    return Outputs(store, textfile, None if gateway is None else pushgateway_url(gateway))


def pushgateway_url(text: str) -> str:
    """The Pushgateway URL as prometheus_client takes it (http:// where no scheme is written), or a one-line
    UsageError, its password masked, unless it names a host (a name, an IPv4 address or a bracketed IPv6
    one) and, where it names one, a port of 1 to 65535. Credentials (https://USER:PASSWORD@HOST:PORT) are
    taken, and never shown."""
    if not text.strip() or any(c.isspace() or not c.isprintable() for c in text):
        raise UsageError("--pushgateway: the URL is empty or holds whitespace or a control character; give the "
                         "gateway's http://HOST:PORT")
    url = text if "://" in text else f"http://{text}"
    shown = clipped(masked(url))  # masked before clipped: a clipped URL may have lost the @ that marks a password
    if "://" not in text and "@" in text:
        raise UsageError(f"--pushgateway {shown}: a URL with credentials needs its scheme: write "
                         f"https://{clipped(masked(url).removeprefix('http://'))}")
    scheme, _, rest = url.partition("://")
    if scheme.lower() not in ("http", "https"):
        raise UsageError(f"--pushgateway {shown}: a Pushgateway speaks http:// or https://, not {clipped(scheme)}://")
    # The host follows the last @ (a password may hold / ? #, typed unescaped), and ends at the path.
    userinfo, at, after = rest.rpartition("@")
    if at and re.search(r"[/?#]", userinfo):
        raise UsageError(f"--pushgateway {shown}: its credentials hold / ? or #, which end a URL's host part: "
                         "write them percent-encoded (%2F, %3F, %23)")
    _check_host(re.split(r"[/?#]", after, maxsplit=1)[0], shown)
    try:
        parts = urlsplit(url)
    except ValueError as e:  # a [ or ] in the user part, which urlsplit takes for a broken address
        raise UsageError(f"--pushgateway {shown}: not a URL ({e})") from None
    if parts.query or parts.fragment:
        raise UsageError(f"--pushgateway {shown}: a Pushgateway URL takes no ?query or #fragment "
                         "(prometheus_client adds /metrics/job/... to it)")
    return parts.geturl()


def _check_host(hostport: str, shown: str) -> None:
    """HOST[:PORT] of a URL, refused in one line unless HOST is a host name or an IP address and PORT a port."""
    if hostport.startswith("["):
        literal, closed, port = hostport[1:].partition("]")
        if port and not port.startswith(":"):
            raise UsageError(f"--pushgateway {shown}: {clipped(port)!r} after the IPv6 address is no :PORT")
        if not closed:
            raise UsageError(f"--pushgateway {shown}: the [ of an IPv6 address is never closed; write one as "
                             "http://[::1]:9091")
        try:
            ipaddress.IPv6Address(literal.partition("%")[0])  # a zone (%eth0) aside
        except ValueError:
            raise UsageError(f"--pushgateway {shown}: [{clipped(literal)}] is not an IPv6 address") from None
    else:
        host, _, port = hostport.partition(":")
        port = f":{port}" if _ else ""
        if not _HOST_NAME.fullmatch(host):
            raise UsageError(f"--pushgateway {shown}: it names no host; give the gateway's http://HOST:PORT")
    if port and not (re.fullmatch(r":[0-9]{1,5}", port) and 1 <= int(port[1:]) <= 65535):
        raise UsageError(f"--pushgateway {shown}: the port {clipped(port[1:])!r} is not a number 1 to 65535")


def publish(record: RunRecord, outputs: Outputs, say: TextIO | None = sys.stdout) -> bool:
    """Record the run and export its figures; False when any of it failed (said on stderr).
    say: where to tell what was done (None: nothing, for a command whose output is one line)."""
    ok = True
    if outputs.store is not None:
        ok &= _attempt(lambda: _record(record, outputs.store, say), "store", outputs.store.shown)
    if outputs.textfile is None and outputs.pushgateway is None:
        return ok
    from clusterbench.publish import prometheus  # prometheus_client: only where figures are exported

    registry = prometheus.registry_of(record, started_s(record.started_utc))
    if outputs.textfile is not None:
        ok &= _attempt(lambda: prometheus.write_textfile(outputs.textfile, registry), "--metrics-textfile",
                       str(outputs.textfile))
    if outputs.pushgateway is not None:
        ok &= _attempt(lambda: prometheus.push(outputs.pushgateway, registry, record.host), "--pushgateway",
                       masked(outputs.pushgateway))
    return ok


def _record(record: RunRecord, where: Where, say: TextIO | None) -> None:
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
        print(masked(f"clusterbench: {what} {target}: {text} (the run's own results are kept)"), file=sys.stderr,
              flush=True)
        return False
    return True
