"""`clusterbench peak`: matmul TFLOP/s per dtype and copy GB/s of the local devices.

The figures MFU falls back on when a device is not in the peak table (docs/methodology.md §3);
the table's value is printed beside them when there is one. The peaks stage of `run` measures
the same on every rank; this command measures every local device from one process.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from clusterbench import argtypes
from clusterbench.hw.render import PEAK_HEADER, peak_lines
from clusterbench.results.folder import RunFolder
from clusterbench.runtime.command import LocalCommand
from clusterbench.stages.peaks import stage
from clusterbench.stages.peaks.records import Peaks


@dataclass(frozen=True)
class PeakCommandOptions:
    peak: stage.PeakOptions
    devices: tuple[str, ...]


def add_arguments(p: argparse.ArgumentParser) -> None:
    stage.PEAKS_STAGE.add_arguments(p)
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: every GPU, else the CPU)")


def prepare(args: argparse.Namespace) -> PeakCommandOptions:
    """Devices are checked here, so a bad one is refused before a run folder exists."""
    import torch  # only once this command runs: the parser of every command is built without it

    from clusterbench.hw import peaks

    choice = getattr(args, "device", None)
    if choice:
        devices = [choice]
    elif torch.cuda.is_available():
        devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    else:
        devices = ["cpu"]
    checked = tuple(str(peaks.check_device(d)) for d in devices)
    opts = stage.PeakOptions(**argtypes.given(args, stage.PeakOptions))
    for device in checked:
        peaks.check_memory(device, opts.size, opts.dtypes)
    return PeakCommandOptions(opts, checked)


def work(folder: RunFolder, opts: PeakCommandOptions) -> None:
    import torch

    from clusterbench.hw import peaks
    from clusterbench.runtime.devices import device_name

    print(f"# clusterbench peak: torch.mm n x n, {opts.peak.seconds:g} s per figure")
    print(PEAK_HEADER, flush=True)
    found = []
    for dev in opts.devices:
        entry = peaks.measure_device(dev, device_name(torch.device(dev)), list(opts.peak.dtypes), opts.peak.size,
                                     opts.peak.seconds)
        print("\n".join(peak_lines(entry)), flush=True)
        found.append(entry)
        folder.record(peaks=Peaks.of(found))


COMMAND = LocalCommand(
    "peak", "measured matmul TFLOP/s per dtype and copy GB/s of the local devices",
    add_arguments, prepare, work,
)
