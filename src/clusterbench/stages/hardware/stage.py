"""The hardware stage: the picture of rank 0's host (the harness took it as the run began), with the
PCIe links its GPUs hold under load; the metrics and report sections of the picture and of where
each rank runs against its GPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clusterbench.analyse.metrics import Metrics
from clusterbench.argtypes import option
from clusterbench.report.blocks import Part
from clusterbench.report.placement import placement_section
from clusterbench.results.run import Run
from clusterbench.shape import JobShape
from clusterbench.stages.hardware.metrics import metrics
from clusterbench.stages.hardware.records import HARDWARE
from clusterbench.stages.hardware.report import hardware_section
from clusterbench.stages.stage import Stage, as_given

if TYPE_CHECKING:
    from clusterbench.runtime.rank import Rank


@dataclass(frozen=True)
class HardwareOptions:
    pcie_load: bool = option(False, "--pcie-load", action="store_true",
                             help="re-read each GPU's PCIe link while its rank keeps it busy (idle GPUs park their "
                                  "links)")


def run_defaults(shape: JobShape, quick: bool) -> dict[str, Any]:
    return {"pcie_load": shape.device_type == "cuda"}


def work(rank: Rank, opts: HardwareOptions) -> None:
    """Each rank reads its own GPU's link while it keeps that GPU busy: a rank that opened contexts on
    its neighbours' GPUs would fail under EXCLUSIVE_PROCESS compute mode and disturb them."""
    # torch and the probes load on the ranks only: commands that read run folders read this module too.
    import socket

    import torch
    import torch.distributed as dist

    from clusterbench.hw.render import render
    from clusterbench.hw.topology import own_pcie_under_load, with_pcie_readings

    device = rank.worker.device
    mine = None
    if opts.pcie_load and device.type == "cuda":
        uuid = str(torch.cuda.get_device_properties(device).uuid)
        mine = (socket.gethostname(), uuid, own_pcie_under_load(device.index or 0, uuid))
    everyone: list = [None] * rank.worker.world_size
    dist.all_gather_object(everyone, mine)
    if rank.folder is None:
        return
    info = HARDWARE.of(rank.folder.run)
    loaded = {uuid: link for host, uuid, link in filter(None, everyone) if host == info.hostname and link}
    info = with_pcie_readings(info, loaded)
    rank.folder.record(hardware=info)
    rank.say(render(info))


def report(run: Run, metrics: Metrics) -> list[Part]:
    parts = [Part("hardware", "Hardware", hardware_section(HARDWARE.of(run)))] if HARDWARE.of(run) else []
    if any(p.cpus for p in run.env.ranks):
        parts.append(Part("placement", "Placement", placement_section(run, metrics)))
    return parts


HARDWARE_STAGE = Stage(
    name="hardware", options=HardwareOptions, resolve=as_given, work=work, sections=(HARDWARE,),
    metrics=metrics, report=report, run_defaults=run_defaults, optional=False,
)
