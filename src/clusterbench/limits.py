"""Theoretical link bandwidths and peak matmul throughput: the tables of docs/methodology.md §2-§3.

Every hardware figure clusterbench compares a measurement against lives here, so a
corrected number is changed in one place. Units: GB/s = 1e9 bytes per second, one
direction; TFLOP/s = 1e12 floating-point operations per second, dense (no sparsity).

Lookups answer None for anything not in a table: a made-up peak would turn into a
confident but wrong efficiency or MFU, so callers measure instead (see hw.peaks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class NvLinkGeneration:
    """One NVLink generation as a full-size GPU of that era carries it."""

    example_gpus: str
    links: int
    per_link_gbps: float
    note: str = ""

    @property
    def per_gpu_gbps(self) -> float:
        return self.links * self.per_link_gbps


# Keyed by generation (major version), not by NVML's nvmlNvlinkVersion_t enum value.
NVLINK: dict[int, NvLinkGeneration] = {
    2: NvLinkGeneration("V100", links=6, per_link_gbps=25.0),
    3: NvLinkGeneration("A100", links=12, per_link_gbps=25.0),
    4: NvLinkGeneration(
        "H100, H200",
        links=18,
        per_link_gbps=25.0,
        note="about 370 GB/s is the usual busbw ceiling without NVLS (NVLink SHARP)",
    ),
    5: NvLinkGeneration("B200", links=18, per_link_gbps=50.0),
}

# PCIe x16, one direction, after line encoding. Generations 1 and 2 are kept because an
# idle GPU parks its link there and the current reading must still get a figure.
PCIE_X16_GBPS: dict[int, float] = {1: 4.0, 2: 8.0, 3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}

# Port line rates in Gb/s; GB/s is that / 8.
INFINIBAND_GBIT: dict[str, float] = {"HDR": 200.0, "NDR": 400.0, "XDR": 800.0}
ROCE_GBIT: tuple[float, ...] = (100.0, 200.0, 400.0)

_INFINIBAND_NAMES = ("infiniband", "ib")
_ETHERNET_NAMES = ("ethernet", "roce", "eth")


@dataclass(frozen=True)
class PeakEntry:
    """bf16 dense TFLOP/s of devices whose name matches `pattern` (case-insensitive)."""

    label: str
    pattern: str
    bf16_tflops: float


# Ordered; the first match wins. Word boundaries keep "H20" off "H200", "B200" off
# "GB200", "L40S" off "L40". Names left ambiguous on purpose answer None: a bare
# "NVIDIA H100" may be PCIe (756) or SXM (989), and the NVL boards run at lower clocks.
PEAKS: tuple[PeakEntry, ...] = (
    PeakEntry("A100", r"\bA100\b", 312.0),
    PeakEntry("H100 PCIe", r"\bH100\b.*\bPCIe\b", 756.0),
    PeakEntry("H100 SXM", r"\bH100\b(?!.*\bNVL\b).*(\bSXM|\bHBM3\b)", 989.0),
    PeakEntry("H200", r"\bH200\b(?!.*\bNVL\b)", 989.0),
    PeakEntry("H20", r"\bH20\b", 148.0),
    PeakEntry("B200", r"\bB200\b", 2250.0),
    PeakEntry("L40S", r"\bL40S\b", 362.0),
    PeakEntry("MI300X", r"\bMI300X\b", 1300.0),
)

# Tensor-core fp16 and bf16 run at the same rate on every device in PEAKS. fp32 and
# tf32 are not in the reference, so they answer None rather than a remembered number.
_HALF_DTYPES = {"bfloat16", "bf16", "float16", "fp16", "half"}


def peak_entry(device_name: str) -> PeakEntry | None:
    """The PEAKS row for a device name as NVML or torch reports it, or None."""
    for entry in PEAKS:
        if re.search(entry.pattern, device_name, flags=re.IGNORECASE):
            return entry
    return None


def peak_tflops(device_name: str, dtype: str) -> float | None:
    """Dense peak TFLOP/s of `device_name` for `dtype`, or None when not known."""
    if dtype.lower().removeprefix("torch.") not in _HALF_DTYPES:
        return None
    entry = peak_entry(device_name)
    return entry.bf16_tflops if entry else None


def nvlink_gbps(version: int, links: int) -> float | None:
    """One-direction GB/s of `links` active links of NVLink generation `version`.

    Proportional to the link count, so a GPU with links down gets a lower figure.
    `version` is the generation (4 for H100), not NVML's enum value. None if unknown.
    """
    gen = NVLINK.get(version)
    if gen is None or links < 0:
        return None
    return links * gen.per_link_gbps


def pcie_gbps(gen: int, width: int) -> float | None:
    """One-direction GB/s of a PCIe link of generation `gen` and `width` lanes, or None."""
    x16 = PCIE_X16_GBPS.get(gen)
    if x16 is None or width <= 0:
        return None
    return x16 * width / 16


def nic_gbps(link_layer: str, rate_gbit: float) -> float:
    """GB/s of a network port whose line rate is `rate_gbit` Gb/s.

    `link_layer` is "InfiniBand" or "Ethernet" (RoCE or plain), as in
    /sys/class/infiniband/*/ports/*/link_layer. The line rate already is the data rate
    for both (HDR 200 Gb/s -> 25 GB/s, RoCE 400 GbE -> 50 GB/s).
    """
    if link_layer.lower() not in _INFINIBAND_NAMES + _ETHERNET_NAMES:
        raise ValueError(f"unknown link layer {link_layer!r}: expected InfiniBand or Ethernet")
    return rate_gbit / 8


def nic_label(link_layer: str, rate_gbit: float) -> str:
    """A short name for an RDMA port: "IB NDR", "RoCE 400GbE", or the bare rate."""
    if link_layer.lower() in _INFINIBAND_NAMES:
        names = [name for name, gbit in INFINIBAND_GBIT.items() if gbit == rate_gbit]
        return f"IB {names[0]}" if names else f"IB {rate_gbit:g} Gb/s"
    if rate_gbit in ROCE_GBIT:
        return f"RoCE {rate_gbit:g}GbE"
    return f"{rate_gbit:g} Gb/s"
