"""`clusterbench peak`: matmul TFLOP/s per dtype and copy GB/s on the local devices.

The figures are the measured peaks MFU falls back on when a device is not in the table
(REFERENCE.md §3); the table's value is printed beside them when there is one.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

from clusterbench.dist import device_name
from clusterbench.errors import UsageError
from clusterbench.hw import limits, peaks
from clusterbench.results import RunFolder, default_run_dir

DTYPES = ("float32", "float16", "bfloat16")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated (default float32,bfloat16)")
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: every GPU, else the CPU)")
    p.add_argument("--seconds", type=float, default=1.0, help="timed seconds per figure (default 1)")
    p.add_argument("--size", type=int, default=None, help="matmul n (default 8192 GPU, 2048/1024 CPU)")
    p.add_argument("--out", default=None, help="run folder (default runs/<UTC time>-peak)")


def _devices(choice: str | None) -> list[str]:
    if choice:
        return [choice]
    if torch.cuda.is_available():
        return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return ["cpu"]


def measure_device(dev: str, dtypes: list[str], size: int | None, seconds: float) -> dict:
    """Matmul TFLOP/s per dtype and copy GB/s of one device, each printed as it is measured."""
    name = device_name(torch.device(dev))
    entry = {"device": dev, "name": name, "matmul": [], "copy": None}
    for dtype in dtypes:
        m = peaks.measure_matmul_tflops(dev, dtype, n=size, seconds=seconds)
        m["table_tflops"] = limits.peak_tflops(name, dtype)
        entry["matmul"].append(m)
        table = "-" if m["table_tflops"] is None else f"{m['table_tflops']:g}"
        print(f"  {dev:<10} {name[:28]:<28} {m['dtype']:<9} {m['n']:>6} {m['tflops']:>10.4g} {table:>8}",
              flush=True)
    entry["copy"] = peaks.measure_copy_gbps(dev, seconds=min(seconds, 0.5))
    print(f"  {dev:<10} copy {entry['copy']['nbytes'] >> 20} MiB: {entry['copy']['gbps']:.1f} GB/s", flush=True)
    return entry


def peaks_doc(entries: list[dict]) -> dict:
    """run.json's "peaks": every measurement flat, each naming its device."""
    return {"matmul": [m for e in entries for m in e["matmul"]], "copy": [e["copy"] for e in entries]}


HEADER = f"  {'device':<10} {'name':<28} {'dtype':<9} {'n':>6} {'TFLOP/s':>10} {'table':>8}"


def main(args: argparse.Namespace) -> int:
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    unknown = [d for d in dtypes if d not in DTYPES] or ([] if dtypes else [args.dtypes])
    if unknown:
        raise UsageError(f"--dtypes: unknown {', '.join(unknown)!r}: choose from {', '.join(DTYPES)}")
    if not (math.isfinite(args.seconds) and args.seconds > 0):
        raise UsageError(f"--seconds must be positive, got {args.seconds:g}")
    if args.size is not None and args.size < 1:
        raise UsageError(f"--size must be at least 1, got {args.size}")
    devices = [str(peaks.check_device(d)) for d in _devices(args.device)]
    folder = RunFolder(Path(args.out) if args.out else default_run_dir("peak"), "peak", list(sys.argv))
    results = []
    print(f"# clusterbench peak: torch.mm n x n, {args.seconds:g} s per figure")
    print(HEADER)
    for dev in devices:
        results.append(measure_device(dev, dtypes, args.size, args.seconds))
        folder.set("peaks", peaks_doc(results))
    folder.finish("complete")
    print(f"# results: {folder.path}/run.json")
    return 0
