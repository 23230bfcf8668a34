"""A run's or a check's figures as Prometheus text exposition, through prometheus_client: a file for
node_exporter's textfile collector (written whole or not at all), or a push to a Pushgateway.

Every figure is one series of `clusterbench_figure`, told apart by its labels (node, device, metric,
hardware_class, command), so a new metric needs no new name and Grafana selects by label.

A Pushgateway URL with credentials (https://USER:PASSWORD@HOST:PORT, checked by publish.pushgateway_url)
is pushed to with HTTP basic auth: urllib would take USER:PASSWORD@HOST for a host name, and the URL
prometheus_client is handed (and any error it raises) holds no password.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from urllib.parse import unquote, urlsplit

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway, write_to_textfile
from prometheus_client.exposition import basic_auth_handler, default_handler

from clusterbench.store.record import RunRecord

PUSH_TIMEOUT_S = 10.0
JOB = "clusterbench"


def registry_of(record: RunRecord, started_s: float) -> CollectorRegistry:
    registry = CollectorRegistry()
    figure = Gauge("clusterbench_figure", "A figure clusterbench measured, named by its metric label",
                   ["node", "device", "metric", "hardware_class", "command"], registry=registry)
    for f in record.figures:
        figure.labels(f.node, f.device, f.metric, f.klass, record.command).set(f.value)
    healthy = Gauge("clusterbench_node_healthy", "1 when the node passed its last run of this command, else 0",
                    ["node", "hardware_class", "command", "verdict"], registry=registry)
    classes = {**record.node_classes, **{f.node: f.klass for f in record.figures}}
    for node, verdict in sorted(record.node_verdicts.items()):
        healthy.labels(node, classes.get(node, "?"), record.command, verdict).set(1 if verdict == "PASS" else 0)
    when = Gauge("clusterbench_run_started_seconds", "When the run started, in seconds since the epoch",
                 ["command", "host"], registry=registry)
    when.labels(record.command, record.host).set(started_s)
    return registry


def write_textfile(path: Path, registry: CollectorRegistry) -> None:
    """node_exporter reads the old file or the new one, never half of one (prometheus_client renames)."""
    write_to_textfile(str(path), registry)


def push(url: str, registry: CollectorRegistry, host: str) -> None:
    parts = urlsplit(url)
    handler = default_handler
    if "@" in parts.netloc:
        handler = partial(basic_auth_handler, username=unquote(parts.username or ""),
                          password=unquote(parts.password or ""))
        parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
    push_to_gateway(parts.geturl(), job=JOB, registry=registry, grouping_key={"instance": host},
                    timeout=PUSH_TIMEOUT_S, handler=handler)
