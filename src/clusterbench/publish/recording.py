"""A finished run as the results store keeps it: its figures with the node, device and hardware
class that measured them, and each node's verdict (docs/methodology.md, "The results store").

A run of one node is that node's figures. A job across nodes is measured as a whole: its figures
stand under the job's nodes in host-list form (node[01-04]). A fleet adds a row per node, its own
figures as `node.<figure>` and its verdict, which is what history and baselines follow node by node.
"""

from __future__ import annotations

import hashlib

from clusterbench.inputs import hostlist
from clusterbench.nodechecks.bands import node_class
from clusterbench.results.run import Run
from clusterbench.stages.hardware.records import HARDWARE, Hardware
from clusterbench.stages.registry import STAGES, metrics_of
from clusterbench.store.record import NODE_PREFIX, Figure, RunRecord


def hardware_class(hardware: Hardware | None) -> str:
    """The class a run's host is compared within, as the fleet names it."""
    if hardware is None:
        return "?"
    if hardware.gpus:
        return node_class(hardware.gpus[0].name or "?", len(hardware.gpus), hardware.cpu.logical_cores)
    return node_class(hardware.cpu.model or "?", 0, hardware.cpu.logical_cores)


def uid_of(run: Run) -> str:
    """The run's own uid; a run.json from before uids stands for itself by what it started as."""
    if run.uid:
        return run.uid
    identity = "\0".join([run.command, run.started_utc, run.env.hostname, *run.argv])
    return hashlib.sha256(identity.encode()).hexdigest()[:32]


def record_of(run: Run, folder: str | None) -> RunRecord:
    hosts = list(dict.fromkeys(run.env.hosts)) or [run.env.hostname]
    job = hostlist.compress(hosts) if len(hosts) > 1 else hosts[0]
    klass = hardware_class(HARDWARE.of(run))
    figures = [Figure(job, "", name, value, klass) for name, value in sorted(metrics_of(run).values.items())]
    verdict = run.verdict if run.status == "complete" else "FAIL"
    # A node has a row of its own where its class is known: one node's run, or a fleet's rows.
    classes = {hosts[0]: klass} if len(hosts) == 1 else {}
    verdicts: dict[str, str] = {host: verdict for host in classes} if verdict else {}
    for row in (node for stage in STAGES for node in stage.nodes(run)):
        figures += [Figure(row.node, "", NODE_PREFIX + name, value, row.klass)
                    for name, value in sorted(row.figures.items())]
        verdicts[row.node] = row.verdict
        classes[row.node] = row.klass
    return RunRecord(uid_of(run), run.command, run.started_utc, run.finished_utc, run.status, run.verdict,
                     run.env.hostname, folder, figures, verdicts, run.error, classes)
