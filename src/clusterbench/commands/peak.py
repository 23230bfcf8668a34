"""`clusterbench peak`: matmul TFLOP/s per dtype and copy GB/s of the local devices.

The figures MFU falls back on when a device is not in the peak table (docs/methodology.md §3);
the table's value is printed beside them when there is one.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch

from clusterbench import args as argtypes
from clusterbench.dist import device_name
from clusterbench.harness import LocalCommand
from clusterbench.hw import peaks
from clusterbench.hw.render import PEAK_HEADER, peak_lines
from clusterbench.hw.stages import PeakOptions
from clusterbench.results.folder import RunFolder
from clusterbench.results.hardware import Peaks

DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class PeakCommandOptions:
    peak: PeakOptions
    devices: tuple[str, ...]


def dtype_list(text: str) -> tuple[str, ...]:
    names = tuple(d.strip() for d in text.split(",") if d.strip())
    unknown = [d for d in names if d not in DTYPES] or ([] if names else [text])
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)!r}: choose from {', '.join(DTYPES)}")
    return names


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtypes", type=dtype_list, help="comma-separated (default float32,bfloat16)")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: every GPU, else the CPU)")
    p.add_argument("--seconds", type=argtypes.real(0.0), help="timed seconds per figure (default 1)")
    p.add_argument("--size", type=argtypes.whole(1), help="matmul n (default 8192 GPU, 2048/1024 CPU)")


def prepare(args: argparse.Namespace) -> PeakCommandOptions:
    """Devices are checked here, so a bad one is refused before a run folder exists."""
    choice = getattr(args, "device", None)
    if choice:
        devices = [choice]
    elif torch.cuda.is_available():
        devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    else:
        devices = ["cpu"]
    checked = tuple(str(peaks.check_device(d)) for d in devices)
    opts = PeakOptions(**argtypes.given(args, PeakOptions))
    for device in checked:
        peaks.check_memory(device, opts.size, opts.dtypes)
    return PeakCommandOptions(opts, checked)


def work(folder: RunFolder, opts: PeakCommandOptions) -> None:
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
