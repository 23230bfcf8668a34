"""Where each rank ran: its node, device, the CPUs it may use and their NUMA nodes against its GPU's."""

from __future__ import annotations

from clusterbench.analyse.metrics import Metrics
from clusterbench.report.blocks import esc, note, section, sentence, table
from clusterbench.results.run import Placement, Run


def placement_section(run: Run, metrics: Metrics) -> str:
    def numa(p: Placement) -> str:
        if p.device_numa is None or not p.cpu_numa:
            return "-"
        return "same node" if p.cpu_numa == [p.device_numa] else (
            '<span class="bad">another NUMA node</span>' if p.device_numa not in p.cpu_numa else "not pinned")

    rows = [[str(p.rank), esc(p.node), esc(p.device), esc(p.cpus), esc(", ".join(map(str, p.cpu_numa)) or None),
             esc(p.device_numa), numa(p)] for p in run.env.ranks]
    body = table(["rank", "node", "device", "CPUs it may use", "their NUMA nodes", "GPU's NUMA node", "placement"],
                 rows, numeric_from=7)
    said = metrics.notes.get("hardware.affinity.far_from_gpu") or metrics.absent.get("hardware.affinity.far_from_gpu")
    if said:
        body = note(esc(sentence(said))) + body
    return section("placement", "Rank placement", body,
                   lead="A rank should run on CPUs of its GPU's NUMA node (docs/methodology.md §12).")
