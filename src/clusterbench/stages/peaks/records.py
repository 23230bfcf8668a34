"""run.json's `peaks` section: matmul TFLOP/s per dtype and copy GB/s of each device (docs/methodology.md §12)."""

from __future__ import annotations

from dataclasses import dataclass, field

from clusterbench.results.codec import AT_LEAST_ONE, MESSAGE_BYTES, NONNEGATIVE, SECONDS
from clusterbench.results.run import Section


@dataclass(frozen=True)
class MatmulPeak:
    device: str
    dtype: str
    n: int = field(metadata=AT_LEAST_ONE)
    tflops: float = field(metadata=NONNEGATIVE)
    iters: int = field(metadata=AT_LEAST_ONE)
    seconds: float = field(metadata=SECONDS)
    # the datasheet figure, where the peak table knows the device
    table_tflops: float | None = field(default=None, metadata=NONNEGATIVE)


@dataclass(frozen=True)
class CopyPeak:
    device: str
    nbytes: int = field(metadata=MESSAGE_BYTES)
    gbps: float = field(metadata=NONNEGATIVE)  # read and write both counted
    iters: int = field(metadata=AT_LEAST_ONE)
    seconds: float = field(metadata=SECONDS)


@dataclass(frozen=True)
class DevicePeaks:
    """One device's measurements, as a rank or the peak command takes them."""

    device: str
    name: str
    matmul: list[MatmulPeak]
    copy: CopyPeak


@dataclass(frozen=True)
class Peaks:
    matmul: list[MatmulPeak] = field(default_factory=list)
    copy: list[CopyPeak] = field(default_factory=list)

    @staticmethod
    def of(devices: list[DevicePeaks]) -> Peaks:
        return Peaks([m for d in devices for m in d.matmul], [d.copy for d in devices])


PEAKS = Section("peaks", Peaks | None)
