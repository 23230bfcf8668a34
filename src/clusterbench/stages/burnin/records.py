"""A burn-in as run.json keeps it (its section `burnin`) and burnin.csv holds it: every device
under sustained load for a duration, a row per device and window of time in burnin.csv, and the findings that only
time shows (docs/burnin.md). burnin.csv gets every window as it ends; run.json, every so often, each device's
series thinned to at most burnin/series.MAX_POINTS points (neighbouring windows merged, so an 8-hour soak's section
is as large as a quarter-hour's), with what each node's counters said of the soak so far. A soak cut short by
Ctrl-C or a dead rank is judged on what it measured, as partial."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from clusterbench.results.codec import AT_LEAST_ONE, ELAPSED_S, NONNEGATIVE, bounds
from clusterbench.results.findings import Finding
from clusterbench.results.run import Section

TABLE = "burnin"  # its windows, also in <run folder>/burnin.csv
_WORD = re.compile(r"0x[0-9a-f]{16}")
Level = Literal["quick", "medium", "long", "extended"]


@dataclass(frozen=True)
class Window:
    """One device's figures over one window of the soak (burnin.csv's row), or over `spans` windows merged
    (run.json's thinned series: the figures their mean, the wrong words their sum, the repeat the same only where
    it was in each, the digest the hash of theirs)."""

    rank: int = field(metadata=NONNEGATIVE)
    node: str
    device: str  # torch's name of it: cpu, cuda:0
    kind: str  # its model: the deterministic computation is compared across devices of one kind
    t_s: float = field(metadata=ELAPSED_S)  # the window's end, seconds since the soak began
    matmul_tflops: float | None = field(default=None, metadata=NONNEGATIVE)  # None: not timed this window
    memory_gbps: float | None = field(default=None, metadata=NONNEGATIVE)  # the memory test's write+read rate
    busbw_gbps: float | None = field(default=None, metadata=NONNEGATIVE)  # all_reduce among the job's ranks
    wrong_words: int = field(default=0, metadata=NONNEGATIVE)  # memory-test words read back wrong this window
    repeat_same: bool | None = None  # the deterministic computation gave its first result bit for bit; None: not run
    digest: str | None = None  # the hash of that computation's result bytes, voted on across devices of one kind
    spans: int = field(default=1, metadata=AT_LEAST_ONE)  # windows of the soak it stands for


@dataclass(frozen=True)
class WrongWord:
    """A word of the memory test that read back other than written: where, and how."""

    rank: int = field(metadata=NONNEGATIVE)
    device: str
    t_s: float = field(metadata=ELAPSED_S)
    offset: int = field(metadata=NONNEGATIVE)  # the word's byte offset in the tested region
    # The 64-bit words as text, 0x and 16 hex digits: a number of 2**63 or more is no number run.json may hold.
    wrote: str
    read: str

    def __post_init__(self) -> None:
        for word in (self.wrote, self.read):
            if not _WORD.fullmatch(word):
                raise ValueError(f"{word!r} is not a 64-bit word as 0x and 16 hex digits")

    @staticmethod
    def text(value: int) -> str:
        """A 64-bit word (of any sign, as torch's int64 holds it) as the record keeps it."""
        return f"0x{value & (2**64 - 1):016x}"


@dataclass(frozen=True)
class NodeCounters:
    """What one node's error counters and events said of the soak, from its start to the node's latest reading:
    the counts the node rules judge and the findings behind them (hw/counters.soaked)."""

    node: str
    counts: dict[str, float] = field(metadata=NONNEGATIVE)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = field(default=0.0, metadata=ELAPSED_S)  # of the soak the latest reading covers


@dataclass(frozen=True)
class Burnin:
    """The soak: what was asked, how far it got, and what it found."""

    duration_s: float = field(metadata=bounds(above=0))  # asked for
    window_s: float = field(metadata=bounds(above=0))
    level: Level | None = None  # None: an explicit --duration
    memory_bytes: int = field(default=0, metadata=NONNEGATIVE)  # the memory test's region per device
    elapsed_s: float = field(default=0.0, metadata=ELAPSED_S)  # how long it ran
    partial: bool = False  # cut short (Ctrl-C, a dead rank): judged on what it measured, never PASS
    tolerance: float = field(default=0.1, metadata=bounds(0, 1))  # a figure that falls more than this share drifts
    windows: list[Window] = field(default_factory=list)  # every device's series, thinned (see the module's doc)
    wrong: list[WrongWord] = field(default_factory=list)  # the first wrong words, bounded
    counters: list[NodeCounters] = field(default_factory=list)  # each node's, as of its latest reading
    findings: list[Finding] = field(default_factory=list)  # filled once the ranks end
    concluded: bool = False  # the findings are the conclusion's (of the node rules the run was given)


# run.json thins each series; burnin.csv keeps every window
BURNIN = Section("burnin", Burnin | None, files=(f"{TABLE}.csv",))
