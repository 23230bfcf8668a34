"""The hardware picture and the peaks as per-rank work: each rank touches only its own device.

A rank that opened contexts on its neighbours' GPUs would fail under EXCLUSIVE_PROCESS compute
mode and disturb what they measure; so every rank reads and loads its own GPU, the readings
are gathered, and rank 0 alone prints one table and records it.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist

from clusterbench.dist import device_name
from clusterbench.hw import peaks
from clusterbench.hw.render import PEAK_HEADER, peak_lines, render
from clusterbench.hw.topology import own_pcie_under_load, with_pcie_readings
from clusterbench.rank import Rank
from clusterbench.results.hardware import DevicePeaks, Peaks


@dataclass(frozen=True)
class HardwareOptions:
    pcie_load: bool = False  # read each GPU's PCIe link while its rank keeps it busy


@dataclass(frozen=True)
class PeakOptions:
    dtypes: tuple[str, ...] = ("float32", "bfloat16")
    seconds: float = 1.0  # timed seconds per figure
    size: int | None = None  # matmul n; None: 8192 on a GPU, 2048 / 1024 on a CPU


def hardware(rank: Rank, opts: HardwareOptions) -> None:
    """The picture of rank 0's host, with the PCIe links its GPUs hold under load."""
    device = rank.worker.device
    mine = None
    if opts.pcie_load and device.type == "cuda":
        uuid = str(torch.cuda.get_device_properties(device).uuid)
        mine = (socket.gethostname(), uuid, own_pcie_under_load(device.index or 0, uuid))
    everyone: list = [None] * rank.worker.world_size
    dist.all_gather_object(everyone, mine)
    if rank.folder is None:
        return
    info = rank.folder.run.hardware  # the harness recorded this host's picture as the run began
    loaded = {uuid: link for host, uuid, link in filter(None, everyone) if host == info.hostname and link}
    info = with_pcie_readings(info, loaded)
    rank.folder.record(hardware=info)
    rank.say(render(info))


def measure(rank: Rank, opts: PeakOptions) -> None:
    """Matmul TFLOP/s per dtype and copy GB/s: each GPU by its own rank, one CPU by rank 0."""
    rank.progress.at("measuring peaks")
    device = rank.worker.device
    mine = None
    if device.type != "cpu" or rank.worker.rank == 0:  # one CPU is one device however many ranks share it
        mine = peaks.measure_device(str(device), device_name(device), list(opts.dtypes), opts.size, opts.seconds)
    everyone: list[DevicePeaks | None] = [None] * rank.worker.world_size
    dist.all_gather_object(everyone, mine)
    found = [e for e in everyone if e is not None]
    rank.say(PEAK_HEADER)
    for entry in found:
        rank.say("\n".join(peak_lines(entry)))
    if rank.folder is not None:
        rank.folder.record(peaks=Peaks.of(found))
