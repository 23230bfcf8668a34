"""Measured peaks: what a GEMM and a memory copy reach on this device.

These stand in for the limits tables when a device is not listed there, and show how far
a listed device gets from its datasheet figure. Units: TFLOP/s = 1e12 FLOP per second,
GB/s = 1e9 bytes per second.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace

import torch

from clusterbench import limits
from clusterbench.errors import UsageError, is_out_of_memory
from clusterbench.hw.host import meminfo_bytes
from clusterbench.stages.peaks.records import CopyPeak, DevicePeaks, MatmulPeak
from clusterbench.units import human_bytes

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
}
# 8192³ is the usual GPU size (docs/methodology.md §3); on a CPU 2048³ float32 takes a fraction of
# a second, and the slower half-precision CPU kernels get 1024³.
_GPU_MATMUL_N = 8192
_CPU_MATMUL_N = {torch.float32: 2048}
_CPU_MATMUL_N_OTHER = 1024
# Large enough to leave the caches: 1 GiB on a GPU, 64 MiB on a CPU.
_GPU_COPY_BYTES = 1 << 30
_CPU_COPY_BYTES = 64 << 20
_WARMUP_STEPS = 2
_BUSY_CHUNK_BYTES = 64 << 20


def measure_matmul_tflops(
    device: str = "cpu", dtype: str = "float32", n: int | None = None, seconds: float = 1.0
) -> MatmulPeak:
    """Dense GEMM throughput: torch.mm of two n x n matrices, 2·n³ FLOP per call.

    Timing starts after warm-up and waits for the device (CUDA-synchronised), and runs
    whole calls until at least `seconds` have passed. On CUDA, float32 runs at torch's
    current float32 matmul precision (full fp32 unless a caller enabled TF32).
    """
    torch_dtype = _dtype(dtype)
    dev = check_device(device)
    n = n or matmul_n(dev, torch_dtype)
    try:
        a = torch.randn(n, n, device=dev, dtype=torch_dtype)
        b = torch.randn(n, n, device=dev, dtype=torch_dtype)
        out = torch.empty(n, n, device=dev, dtype=torch_dtype)
        iters, elapsed = _time_steps(lambda: torch.mm(a, b, out=out), dev, seconds)
    except (torch.OutOfMemoryError, RuntimeError) as e:
        if not is_out_of_memory(e):
            raise
        raise UsageError(f"matmul {n} x {n} {dtype}: out of memory on {dev}; lower --size") from None
    return MatmulPeak(device=str(dev), dtype=str(torch_dtype).removeprefix("torch."), n=n,
                      tflops=2 * n**3 * iters / elapsed / 1e12, iters=iters, seconds=elapsed)


def measure_copy_gbps(device: str = "cpu", nbytes: int | None = None, seconds: float = 0.5) -> CopyPeak:
    """Device memory bandwidth from tensor copies of `nbytes` each.

    Each copy reads nbytes and writes nbytes, so it counts 2 × nbytes of traffic (the
    convention of STREAM's copy and of GPU bandwidth tests); gbps = that / time / 1e9.
    """
    dev = check_device(device)
    if nbytes is None:
        nbytes = _GPU_COPY_BYTES if dev.type != "cpu" else _CPU_COPY_BYTES
    if nbytes <= 0:
        raise UsageError(f"nbytes must be positive, got {nbytes}")
    src = torch.ones(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    iters, elapsed = _time_steps(lambda: dst.copy_(src), dev, seconds)
    return CopyPeak(device=str(dev), nbytes=nbytes, gbps=2 * nbytes * iters / elapsed / 1e9, iters=iters,
                    seconds=elapsed)


def measure_device(device: str, name: str, dtypes: list[str], n: int | None, seconds: float) -> DevicePeaks:
    """Matmul TFLOP/s per dtype (with the datasheet figure where the table knows the device) and copy GB/s."""
    matmul = [replace(measure_matmul_tflops(device, dtype, n=n, seconds=seconds),
                      table_tflops=limits.peak_tflops(name, dtype)) for dtype in dtypes]
    return DevicePeaks(device, name, matmul, measure_copy_gbps(device, seconds=min(seconds, 0.5)))


@contextmanager
def busy_gpus(devices: list[int] | None = None) -> Iterator[set[str]]:
    """Keep the CUDA devices `devices` (None: every visible one) busy with host-to-device copies.

    Yields the UUIDs (as torch prints them) of the GPUs kept busy; an empty set without
    CUDA. Used to read PCIe link state under load: GPUs park the link when idle. A rank
    passes only its own device, so no process opens a context on another's GPU.
    """
    if not torch.cuda.is_available():
        yield set()
        return
    indices = list(range(torch.cuda.device_count())) if devices is None else devices
    uuids = {str(torch.cuda.get_device_properties(i).uuid) for i in indices}
    pairs = [
        (torch.empty(_BUSY_CHUNK_BYTES, dtype=torch.uint8, pin_memory=True),
         torch.empty(_BUSY_CHUNK_BYTES, dtype=torch.uint8, device=f"cuda:{i}"))
        for i in indices
    ]
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            for src, dst in pairs:
                dst.copy_(src, non_blocking=True)
            # Waiting here (GIL released) keeps the queue short, so stopping is quick.
            for i in indices:
                torch.cuda.synchronize(i)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="clusterbench-busy") as pool:
        worker = pool.submit(work)
        try:
            yield uuids
        finally:
            stop.set()
            worker.result()  # re-raises a failure of the worker here


def _time_steps(step: Callable[[], object], dev: torch.device, seconds: float) -> tuple[int, float]:
    """Run `step` after warm-up until `seconds` pass; return (calls, elapsed seconds)."""
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    for _ in range(_WARMUP_STEPS):
        step()
    sync()
    iters, elapsed = 0, 0.0
    start = time.perf_counter()
    while elapsed < seconds or iters == 0:
        # Size each batch from the rate so far: one sync per batch, not per call.
        batch = 1 if iters == 0 else max(1, math.ceil((seconds - elapsed) * iters / elapsed))
        for _ in range(batch):
            step()
        sync()
        iters += batch
        elapsed = time.perf_counter() - start
    return iters, elapsed


def matmul_n(dev: torch.device, dtype: torch.dtype) -> int:
    return _GPU_MATMUL_N if dev.type != "cpu" else _CPU_MATMUL_N.get(dtype, _CPU_MATMUL_N_OTHER)


def check_memory(device: str, n: int | None, dtypes: tuple[str, ...]) -> None:
    """Refuse, before anything is allocated, a matmul size the device cannot hold (three n x n matrices)."""
    dev = check_device(device)
    need = max(3 * (n or matmul_n(dev, _dtype(d))) ** 2 * _dtype(d).itemsize for d in dtypes)
    free = torch.cuda.mem_get_info(dev)[0] if dev.type == "cuda" else meminfo_bytes(key="MemAvailable")
    if free and need > free:
        raise UsageError(f"--size {n}: three {n} x {n} matrices need {human_bytes(need)}, "
                         f"{dev} has {human_bytes(free)} free")


def _dtype(name: str) -> torch.dtype:
    try:
        return _DTYPES[name.lower().removeprefix("torch.")]
    except KeyError:
        raise UsageError(f"unsupported dtype {name!r}: use float32, float16 or bfloat16") from None


def check_device(name: str) -> torch.device:
    """The device named, or a UsageError saying why this machine has no such device."""
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise UsageError(f"unknown device {name!r}: use cpu or cuda[:N]") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"device {name!r} asked for, but torch sees no CUDA GPU")
    if dev.type == "cuda" and (dev.index or 0) >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise UsageError(f"device {name!r} asked for, but torch sees {count} GPUs")
    if dev.type not in ("cpu", "cuda"):
        raise UsageError(f"unsupported device {name!r}: use cpu or cuda[:N]")
    return dev
