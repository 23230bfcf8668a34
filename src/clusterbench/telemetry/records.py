"""Device telemetry sampled while the stages ran, as run.json and telemetry.csv store it.

Every sample goes to telemetry.csv only (10 Hz x 8 GPUs x 10 minutes would bloat run.json);
run.json keeps, per stage and device, the min, median and max of each figure. Times are
seconds since the first stage started, on the wall clock of the host that sampled (hosts whose
clocks disagree shift against each other by that much). Anything the device or the OS cannot tell is
None. Units: W, MHz, degrees C, %, MB/s = 1e6 bytes per second (docs/methodology.md §10).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from clusterbench.results import table_csv
from clusterbench.results.codec import NONNEGATIVE, POSITIVE, bounds
from clusterbench.results.run import Section

SHARE = bounds(0, 1)

TABLE = "telemetry"  # its samples: <run folder>/telemetry.csv
# The figures a sample holds and a summary spreads, in the order plots and tables show them.
FIGURES = ("clock_mhz", "mem_clock_mhz", "power_w", "temperature_c", "util_pct", "mem_util_pct",
           "pcie_tx_mbps", "pcie_rx_mbps", "nvlink_tx_mbps", "nvlink_rx_mbps", "ecc_corrected", "ecc_uncorrected")


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of one device: a row of telemetry.csv."""

    t_s: float  # seconds since the first stage started
    stage: str
    host: str
    device: str  # GPU<NVML index>, or CPU
    rank: int = field(metadata=NONNEGATIVE)  # the rank that sampled it
    # GPU: SM clock; CPU: mean current frequency of the cores the rank may use
    clock_mhz: float | None = field(default=None, metadata=NONNEGATIVE)
    mem_clock_mhz: float | None = field(default=None, metadata=NONNEGATIVE)
    power_w: float | None = field(default=None, metadata=NONNEGATIVE)  # CPU: RAPL package power, where readable
    temperature_c: float | None = None
    util_pct: float | None = field(default=None, metadata=NONNEGATIVE)  # GPU: time a kernel ran; CPU: busy time
    mem_util_pct: float | None = field(default=None, metadata=NONNEGATIVE)  # GPU: time device memory was in use
    pcie_tx_mbps: float | None = field(default=None, metadata=NONNEGATIVE)
    pcie_rx_mbps: float | None = field(default=None, metadata=NONNEGATIVE)
    nvlink_tx_mbps: float | None = field(default=None, metadata=NONNEGATIVE)  # all of the GPU's links together
    nvlink_rx_mbps: float | None = field(default=None, metadata=NONNEGATIVE)
    # volatile counts, since the driver loaded
    ecc_corrected: float | None = field(default=None, metadata=NONNEGATIVE)
    ecc_uncorrected: float | None = field(default=None, metadata=NONNEGATIVE)
    # XID events since the previous sample; None: NVML cannot report them
    xid: int | None = field(default=None, metadata=NONNEGATIVE)
    throttle: str | None = None  # active clock-event reasons joined by "+", or "none"; None: unknown


@dataclass(frozen=True)
class Spread:
    min: float
    median: float
    max: float

    def __post_init__(self) -> None:
        if not self.min <= self.median <= self.max:
            raise ValueError(f"min {self.min:g}, median {self.median:g} and max {self.max:g} are out of order")


@dataclass(frozen=True)
class DeviceStage:
    """One device over one stage: each figure's spread over its samples (None: never known)."""

    stage: str
    host: str
    device: str
    kind: str  # the device's model: peers for the straggler check are devices of one kind
    rank: int = field(metadata=NONNEGATIVE)
    samples: int = field(metadata=NONNEGATIVE)
    clock_mhz: Spread | None = None
    mem_clock_mhz: Spread | None = None
    power_w: Spread | None = None
    temperature_c: Spread | None = None
    util_pct: Spread | None = None
    mem_util_pct: Spread | None = None
    pcie_tx_mbps: Spread | None = None
    pcie_rx_mbps: Spread | None = None
    nvlink_tx_mbps: Spread | None = None
    nvlink_rx_mbps: Spread | None = None
    ecc_corrected: Spread | None = None
    ecc_uncorrected: Spread | None = None
    xid_events: int | None = field(default=None, metadata=NONNEGATIVE)
    # reason -> share of the samples it was active in
    throttle: dict[str, float] | None = field(default=None, metadata=SHARE)

    @property
    def where(self) -> str:
        return f"{self.host} {self.device} ({self.kind})"


@dataclass(frozen=True)
class StageWindow:
    """When a stage ran: from the first rank's start to the last rank's end."""

    name: str
    start_s: float
    end_s: float


@dataclass
class Telemetry:
    hz: float = field(metadata=POSITIVE)  # samples per second per device
    t0_unix: float  # the first stage's start (the clock of the rank that began it first): t_s counts from here
    stages: list[StageWindow] = field(default_factory=list)
    devices: list[DeviceStage] = field(default_factory=list)  # per stage and device
    notes: list[str] = field(default_factory=list)  # what was not sampled, and why


def csv_columns() -> list[str]:
    return [f.name for f in fields(Sample)]


def read_samples(path: Path) -> list[Sample]:
    """telemetry.csv as written by the run folder; ValueError naming the file (and the line) for one that
    is not (results/table_csv.py)."""
    return table_csv.read_rows(path, Sample)


# Rank 0 records it while any rank command runs (telemetry/recorder.py); its samples are telemetry.csv's.
TELEMETRY = Section("telemetry", Telemetry | None, files=(f"{TABLE}.csv",))
