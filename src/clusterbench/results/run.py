"""run.json: every section as a typed record, the one layout every command writes and reads.

Version 7 (this one) against version 6: the pair rows live in pairs.csv alone, and run.json says how many
it holds (`pair_rows`): a fleet of thousands of nodes rewrote millions of rows with every save; each
fleet retest names the suspect it is a healthy partner's proof for (`suspect`), which version 6 said in
its `why` alone; a fleet's node probes keep their facts, not their node's whole hardware picture; and a
fleet's `coverage`, `racks` and `bad_switches`, which older folders lack. Version 6 against version 5:
`comm_options.rotate`, whether each call's buffers moved to the next offset of memory (comm/rotation.py);
the sweeps of older folders held theirs still and read as false. Version 5 against version 4: a fleet's qualification (`fleet`, docs/methodology.md §16)
and the ranks a failed job lost (`lost`), which older folders lack and read as empty. Version 4
against version 3: the alpha-beta model's section is `cost_model` (version 3
called it `model`, beside the fine-tuned model's own fields), and `extra` holds the sections of
stages the schema does not name (docs/architecture.md). Version 3 against version 2: each
`expected` figure is a record that says where it comes from (version 2 kept a bare number, given
with --expect-busbw), and the new `expected_note`, `canary`, `telemetry` and each rank's CPUs and
NUMA nodes, which older folders lack and read as empty. Version 2 against 1: a "kind" key, a GPU's
PCIe fields grouped under "pcie", `expected` figures, a train section's `reference_note` and
summary `stop_reason`, verdicts that may be SKIP (not judged), and strict JSON (a NaN loss is
null). Older folders are read through `upgrade_v1` to `upgrade_v6`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from clusterbench import __version__
from clusterbench.inputs.documents import whole_number
from clusterbench.nccl.records import NcclFacts
from clusterbench.results.codec import (
    AT_LEAST_ONE,
    IN_CSV,
    NONNEGATIVE,
    POSITIVE,
    SchemaError,
)
from clusterbench.stages.comm.records import CommOptions, CommRow, CostModel, PairRow
from clusterbench.stages.fleet.records import Fleet
from clusterbench.stages.hardware.records import Hardware
from clusterbench.stages.peaks.records import Peaks
from clusterbench.stages.train.records import StepRow, Train
from clusterbench.telemetry.records import Telemetry

RUN_KIND = "clusterbench-run"
SCHEMA_VERSION = 7
Status = Literal["running", "complete", "failed", "interrupted"]


@dataclass(frozen=True)
class Placement:
    """Where one rank ran."""

    rank: int = field(metadata=NONNEGATIVE)
    node: str
    local_rank: int = field(metadata=NONNEGATIVE)
    device: str
    cpus: str | None = None  # the CPUs it may run on, in the kernel's list form (0-55,112-167)
    cpu_numa: list[int] = field(default_factory=list)  # the NUMA nodes of those CPUs
    device_numa: int | None = None  # its GPU's NUMA node


@dataclass
class Env:
    """Facts every run records; `hosts` and `devices` come from every rank."""

    hostname: str
    python: str | None = None
    platform: str | None = None
    clusterbench: str | None = None
    torch: str | None = None
    cuda: str | None = None
    backend: str | None = None
    backend_version: str | None = None
    world_size: int | None = field(default=None, metadata=AT_LEAST_ONE)
    device_type: str | None = None
    hosts: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    ranks: list[Placement] = field(default_factory=list)  # by rank


@dataclass(frozen=True)
class Expected:
    """What systems like this one measure for a metric, and who says so (docs/methodology.md §11)."""

    value: float = field(metadata=POSITIVE)  # in the metric's own unit (busbw in Gbps, as run.json keeps it)
    origin: Literal["given", "file", "shipped"]  # --expect-busbw, --expected FILE, the shipped table
    system: str  # what it was measured on
    source: str  # where it was published, or the file it came from
    low: float | None = field(default=None, metadata=POSITIVE)  # the published range, where the source gives one
    high: float | None = field(default=None, metadata=POSITIVE)
    note: str | None = None

    def __post_init__(self) -> None:
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"its range is empty: low {self.low:g} is above high {self.high:g}")


@dataclass(frozen=True)
class Verdict:
    check: str
    status: Literal["PASS", "WARN", "FAIL", "SKIP"]  # SKIP: not judged, `detail` says why
    detail: str


@dataclass(frozen=True)
class Lost:
    """A rank the job lost: it died, hung or stopped answering while the others went on."""

    rank: int = field(metadata=NONNEGATIVE)
    node: str
    during: str | None = None  # where it last said it was


@dataclass
class Run:
    """A run folder's run.json."""

    schema_version: int = SCHEMA_VERSION
    kind: str = RUN_KIND
    tool: str = "clusterbench"
    version: str = __version__
    command: str = ""
    argv: list[str] = field(default_factory=list)
    uid: str = ""  # this run, wherever its folder is copied: what the results store knows it by
    started_utc: str = ""
    finished_utc: str | None = None
    status: Status = "running"
    error: str | None = None
    env: Env = field(default_factory=lambda: Env(hostname=""))
    hardware: Hardware | None = None
    peaks: Peaks | None = None
    comm_options: CommOptions | None = None
    comm: list[CommRow] = field(default_factory=list)
    pairs: list[PairRow] = field(default_factory=list, metadata=IN_CSV)  # pairs.csv's rows, read with the folder
    pair_rows: int = field(default=0, metadata=NONNEGATIVE)  # how many rows pairs.csv held at the last save
    cost_model: CostModel | None = None  # the alpha-beta model fitted to this run's comm rows (§14)
    nccl: NcclFacts | None = None  # what NCCL's own log says it found and chose (docs/methodology.md §9)
    telemetry: Telemetry | None = None  # device telemetry per stage; its samples: telemetry.csv (§10)
    train: Train | None = None
    train_steps: list[StepRow] = field(default_factory=list)
    canary: Train | None = None  # the tiny float32 task on this hardware, judged against the CPU curve
    fleet: Fleet | None = None  # every node a row, the nodes to take out (§16)
    lost: list[Lost] = field(default_factory=list)  # in a failed run: the ranks that went silent
    expected: dict[str, Expected] = field(default_factory=dict)  # figures rules judge against, by metric
    expected_note: str | None = None  # why the shipped table matched nothing, or what it could not compare
    verdicts: list[Verdict] = field(default_factory=list)
    verdict: Literal["PASS", "WARN", "FAIL"] | None = None
    # Sections of stages the schema does not name, by section name, as plain JSON values: a stage
    # module reads its own back with codec.load and its record type.
    extra: dict[str, Any] = field(default_factory=dict)


def upgrade_v4(doc: dict[str, Any]) -> dict[str, Any]:
    """A version-4 run.json in version 5's layout: the same, without a fleet or lost ranks."""
    return {**doc, "schema_version": 5}


def upgrade_v5(doc: dict[str, Any]) -> dict[str, Any]:
    """A version-5 run.json in version 6's layout: its sweep timed every call on the same buffers."""
    doc = {**doc, "schema_version": 6}
    if isinstance(doc.get("comm_options"), dict):
        doc["comm_options"] = {"rotate": False, **doc["comm_options"]}
    return doc


def upgrade_v6(doc: dict[str, Any]) -> dict[str, Any]:
    """A version-6 run.json in version 7's layout: its pairs are in it (and read from it), and its fleet's retests
    of a suspect against a healthy partner said so in their `why` alone."""
    doc = {**doc, "schema_version": 7}
    if isinstance(doc.get("pairs"), list):
        doc["pair_rows"] = len(doc["pairs"])
    fleet = doc.get("fleet")
    if isinstance(fleet, dict) and isinstance(fleet.get("probes"), list):
        doc["fleet"] = fleet = {**fleet, "probes": [{k: v for k, v in p.items() if k != "hardware"}
                                                   if isinstance(p, dict) else p for p in fleet["probes"]]}
    if isinstance(fleet, dict) and isinstance(fleet.get("retests"), list):
        retests = []
        for t in fleet["retests"]:
            if isinstance(t, dict) and isinstance(t.get("why"), str) and (
                    found := re.fullmatch(r"suspect (.+) against healthy .+", t["why"])):
                t = {**t, "suspect": found.group(1)}
            retests.append(t)
        doc["fleet"] = {**fleet, "retests": retests}
    return doc


def upgrade_v1(doc: dict[str, Any]) -> dict[str, Any]:
    """A version-1 run.json in version 2's layout."""
    doc = {**doc, "kind": RUN_KIND, "schema_version": 2}
    hardware = doc.get("hardware")
    if isinstance(hardware, dict) and isinstance(hardware.get("gpus"), list):
        gpus = []
        for gpu in hardware["gpus"]:
            if isinstance(gpu, dict):
                pcie = {k.removeprefix("pcie_"): v for k, v in gpu.items() if k.startswith("pcie_")}
                gpu = {k: v for k, v in gpu.items() if not k.startswith("pcie_")} | {"pcie": pcie}
            gpus.append(gpu)
        doc["hardware"] = {**hardware, "gpus": gpus}
    options = doc.get("comm_options")
    if isinstance(options, dict):
        # Version 1 kept the resolved sweep: its bounds and step, and pt2pt's direction in the op's name.
        sizes, ops = options.get("sizes") or [8], options.get("ops") or []
        if not isinstance(sizes, list) or not all(whole_number(s) and s > 0 for s in sizes):
            raise SchemaError("comm_options.sizes", "expected a list of sizes in bytes (whole numbers from 1)")
        if not isinstance(ops, list):
            raise SchemaError("comm_options.ops", "expected a list of op names")
        sizes, ops = sorted(sizes), [str(op) for op in ops]
        kept = {k: v for k, v in options.items() if k not in ("sizes", "fit_device_memory")}
        doc["comm_options"] = kept | {
            "min_bytes": sizes[0], "max_bytes": sizes[-1],
            "step_factor": sizes[1] / sizes[0] if len(sizes) > 1 else 2.0,
            "ops": [op.replace("pt2pt_bidir", "pt2pt") for op in ops], "bidirectional": "pt2pt_bidir" in ops}
    return doc


def upgrade_v2(doc: dict[str, Any]) -> dict[str, Any]:
    """A version-2 run.json in version 3's layout: its expected figures came from --expect-busbw."""
    expected = doc.get("expected")
    if isinstance(expected, dict):
        expected = {name: {"value": value, "origin": "given", "system": "this cluster",
                           "source": "--expect-busbw"} for name, value in expected.items()}
    return {**doc, "schema_version": 3, "expected": expected if expected is not None else {}}


def upgrade_v3(doc: dict[str, Any]) -> dict[str, Any]:
    """A version-3 run.json in version 4's layout: its `model` section is the cost model."""
    upgraded = {key: value for key, value in doc.items() if key != "model"}
    return upgraded | {"schema_version": 4, "cost_model": doc.get("model")}
