"""The peaks stage: matmul TFLOP/s per dtype and copy GB/s, each GPU by its own rank, one CPU by
rank 0, printed as one table; `clusterbench peak` measures the same in one process."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clusterbench import argtypes
from clusterbench.analyse.metrics import Metrics
from clusterbench.argtypes import option
from clusterbench.report.blocks import Part
from clusterbench.results.run import Run
from clusterbench.shape import JobShape
from clusterbench.stages.hardware.records import HARDWARE
from clusterbench.stages.peaks.metrics import metrics
from clusterbench.stages.peaks.records import PEAKS
from clusterbench.stages.peaks.report import peaks_section
from clusterbench.stages.stage import Stage, as_given

if TYPE_CHECKING:
    from clusterbench.runtime.rank import Rank

DTYPES = ("float32", "float16", "bfloat16")
RUN_SECONDS = 0.5  # per figure under `run`, where the peaks are one stage of many


def dtype_list(text: str) -> tuple[str, ...]:
    names = tuple(argtypes.names(text, "dtype"))
    unknown = [d for d in names if d not in DTYPES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)!r}: choose from {', '.join(DTYPES)}")
    return names


@dataclass(frozen=True)
class PeakOptions:
    dtypes: tuple[str, ...] = option(("float32", "bfloat16"), "--dtypes", type=dtype_list, help="comma-separated")
    seconds: float = option(1.0, "--seconds", type=argtypes.real(0.0), help="timed seconds per figure")
    size: int | None = option(None, "--size", type=argtypes.whole(1), help="matmul n", shown="8192 GPU, 2048/1024 CPU")


def run_defaults(shape: JobShape, quick: bool) -> dict[str, Any]:
    return {"dtypes": ("bfloat16", "float32") if shape.device_type == "cuda" else ("float32",), "seconds": RUN_SECONDS}


def work(rank: Rank, opts: PeakOptions) -> None:
    # torch and the probes load on the ranks only: commands that read run folders read this module too.
    import torch.distributed as dist

    from clusterbench.hw.peaks import measure_device
    from clusterbench.hw.render import PEAK_HEADER, peak_lines
    from clusterbench.runtime.devices import device_name
    from clusterbench.stages.peaks.records import DevicePeaks, Peaks

    rank.progress.at("measuring peaks")
    device = rank.worker.device
    mine = None
    if device.type != "cpu" or rank.worker.rank == 0:  # one CPU is one device however many ranks share it
        mine = measure_device(str(device), device_name(device), list(opts.dtypes), opts.size, opts.seconds)
    everyone: list[DevicePeaks | None] = [None] * rank.worker.world_size
    dist.all_gather_object(everyone, mine)
    found = [e for e in everyone if e is not None]
    rank.say(PEAK_HEADER)
    for entry in found:
        rank.say("\n".join(peak_lines(entry)))
    if rank.folder is not None:
        rank.folder.record(peaks=Peaks.of(found))


def report(run: Run, metrics: Metrics) -> list[Part]:
    return [Part("peaks", "Peaks", peaks_section(PEAKS.of(run), HARDWARE.of(run)))] if PEAKS.of(run) else []


PEAKS_STAGE = Stage(
    name="peaks", options=PeakOptions, resolve=as_given, work=work, sections=(PEAKS,),
    metrics=metrics, report=report, run_defaults=run_defaults, optional=False,
)
