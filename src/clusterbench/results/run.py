"""run.json: the record of a run, its core (what ran, where, how it ended and what was judged) and its sections,
each declared (a Section) beside the records of the stage or the part of the run-time that owns it, so the
record of a run knows no stage: the one layout every command writes and reads.

A section is one key of run.json, as users know the file: `comm`, `train`, `fleet`. Its declaration says what
type the codec reads it as, what a run without it holds, whether its rows also go to a CSV as they arrive (or
to a CSV alone, run.json counting them), which other files of the run folder it writes, and how an older
run.json's part of it is brought to this version.

Version 8 (this one) against version 7: a section of a stage that earlier versions did not name stands under
its own key, as every section does, where version 7 kept it under `extra`. Version 7 against version 6: the
pair rows live in pairs.csv alone, and run.json says how many it holds (`pair_rows`); each fleet retest names
the suspect it is a healthy partner's proof for (`suspect`); a fleet's node probes keep their facts, not their
node's whole hardware picture; and a fleet's `coverage`, `racks` and `bad_switches`. Version 6 against version
5: `comm_options.rotate`, whether each call's buffers moved (older sweeps held theirs still and read as false).
Version 5 against version 4: a fleet's qualification (`fleet`, docs/methodology.md §16) and the ranks a failed
job lost (`lost`). Version 4 against version 3: the alpha-beta model's section is `cost_model` (version 3 called
it `model`). Version 3 against version 2: each `expected` figure is a record that says where it comes from
(version 2 kept a bare number, given with --expect-busbw), and the new `expected_note`, `canary`, `telemetry`
and each rank's CPUs and NUMA nodes. Version 2 against 1: a "kind" key, a GPU's PCIe fields grouped under
"pcie", `expected` figures, a train section's `reference_note` and summary `stop_reason`, verdicts that may be
SKIP (not judged), and strict JSON (a NaN loss is null). The core's part of each step is here; each section's,
in its declaration's `upgrades`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Generic, Literal, TypeVar

from clusterbench import __version__
from clusterbench.results import codec
from clusterbench.results.codec import AT_LEAST_ONE, NONNEGATIVE, POSITIVE, SchemaError

RUN_KIND = "clusterbench-run"
SCHEMA_VERSION = 8
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


T = TypeVar("T")
Upgrade = Callable[[dict[str, Any]], dict[str, Any]]


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Section(Generic[T]):
    name: str  # its key in run.json
    record: Any  # its type, as the codec reads and checks it: list[CommRow], Train | None
    empty: Callable[[], T] = _nothing  # what a run without it holds
    csv: bool = False  # its rows also in <name>.csv, each appended as it arrives
    counted_as: str | None = None  # its rows in <name>.csv alone, run.json counting them under this key
    files: tuple[str, ...] = ()  # other files of the run folder it writes (telemetry.csv)
    upgrades: Mapping[int, Upgrade] = field(default_factory=dict)  # its part of each step from version v to v + 1

    def of(self, run: Run) -> T:
        """This section of `run`; a list or mapping it lacks is made empty there, so rows added to it stay."""
        if self.name not in run.sections:
            value = self.empty()
            if value is None:
                return value
            run.sections[self.name] = value
        return run.sections[self.name]

    def set(self, run: Run, value: T) -> None:
        run.sections[self.name] = value

    def held(self, run: Run) -> bool:
        """Whether `run` holds anything of this section's."""
        return bool(run.sections.get(self.name))

    @property
    def in_csv(self) -> bool:
        return self.csv or self.counted_as is not None

    @property
    def row(self) -> Any:
        """The record type of one of its rows (a section kept in a CSV is a list of them)."""
        return self.record.__args__[0]


Sections = Mapping[str, Section[Any]]


def table(sections: Iterable[Section[Any]]) -> dict[str, Section[Any]]:
    """Sections by name; two of one name are a mistake of the code, found when it starts."""
    found: dict[str, Section[Any]] = {}
    for section in sections:
        if found.setdefault(section.name, section) is not section:
            raise ValueError(f"two sections of run.json are named {section.name!r}")
    return found


@dataclass
class Run:
    """A run folder's run.json: its core, and its sections by name (each typed by its declaration)."""

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
    lost: list[Lost] = field(default_factory=list)  # in a failed run: the ranks that went silent
    expected: dict[str, Expected] = field(default_factory=dict)  # figures rules judge against, by metric
    expected_note: str | None = None  # why the shipped table matched nothing, or what it could not compare
    verdicts: list[Verdict] = field(default_factory=list)
    verdict: Literal["PASS", "WARN", "FAIL"] | None = None
    sections: dict[str, Any] = field(default_factory=dict)  # by name: run.json holds each under its own key


CORE = tuple(f.name for f in fields(Run) if f.name != "sections")


def to_doc(run: Run, sections: Sections) -> dict[str, Any]:
    """run.json's JSON values: the core, then every section under its key (empty where the run has none, so a
    reader finds every key of its version); a section kept in its CSV alone is counted there instead."""
    doc = {name: codec.dump(getattr(run, name)) for name in CORE}
    for name in [*sections, *(name for name in run.sections if name not in sections)]:
        section = sections.get(name)
        value = run.sections[name] if name in run.sections else section.empty()  # type: ignore[union-attr]
        if section is not None and section.counted_as is not None:
            doc[section.counted_as] = len(value)
        else:
            doc[name] = codec.dump(value)
    return doc


def from_doc(doc: dict[str, Any], sections: Sections) -> Run:
    """A run.json of this version as a Run: every key the core's or a declared section's, each checked by the
    codec; a key of neither is refused, naming it (a document of another version, or damaged)."""
    counts = {section.counted_as: section for section in sections.values() if section.counted_as is not None}
    unknown = [key for key in doc if key not in CORE and key not in sections and key not in counts]
    if unknown:
        raise SchemaError(min(unknown), "unknown field (from another version?)")
    run = codec.load(Run, {key: value for key, value in doc.items() if key in CORE})
    for key, value in doc.items():
        if key in sections:
            loaded = codec.load(sections[key].record, value, key)
            if loaded != sections[key].empty():  # an empty section is one the run lacks, as before it was saved
                run.sections[key] = loaded
        elif key in counts and codec.load(int, value, key) < 0:  # the rows are the CSV's (RunFolder.load)
            raise SchemaError(key, f"must be at least 0, got {value}")
    return run


def upgraded(doc: dict[str, Any], version: int, sections: Sections) -> dict[str, Any]:
    """A run.json of `version` in this version's layout, step by step: the core's part of each step, then each
    section's."""
    while version < SCHEMA_VERSION:
        doc = CORE_UPGRADES.get(version, _same)(doc, sections)
        for section in sections.values():
            if version in section.upgrades:
                doc = section.upgrades[version](doc)
        version += 1
        doc = {**doc, "schema_version": version}
    return doc


def _same(doc: dict[str, Any], sections: Sections) -> dict[str, Any]:
    return doc


def _kind(doc: dict[str, Any], sections: Sections) -> dict[str, Any]:
    """Version 1 -> 2: the document says what it is."""
    return {**doc, "kind": RUN_KIND}


def _expected_given(doc: dict[str, Any], sections: Sections) -> dict[str, Any]:
    """Version 2 -> 3: its expected figures came from --expect-busbw."""
    expected = doc.get("expected")
    if isinstance(expected, dict):
        expected = {name: {"value": value, "origin": "given", "system": "this cluster",
                           "source": "--expect-busbw"} for name, value in expected.items()}
    return {**doc, "expected": expected if expected is not None else {}}


def _extra_hoisted(doc: dict[str, Any], sections: Sections) -> dict[str, Any]:
    """Version 7 -> 8: the sections version 7 kept under `extra` stand under their own keys. One of a stage this
    clusterbench lacks (a team's own) is left out: nothing here can read it, and what reads a run folder never
    writes it back."""
    extra = doc.get("extra")
    if not isinstance(extra, dict):
        return doc
    rest = {key: value for key, value in doc.items() if key != "extra"}
    clash = sorted(set(extra) & set(rest))
    if clash:
        raise SchemaError(f"extra.{clash[0]}", "also a key of its own")
    return {**rest, **{key: value for key, value in extra.items() if key in sections}}


CORE_UPGRADES = {1: _kind, 2: _expected_given, 7: _extra_hoisted}
