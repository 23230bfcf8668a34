"""Rank 0's record of the soak: each window's rows onto burnin.csv at once, the section into run.json every so often
(each device's series thinned: stages/burnin/series.py) and whole at the end, each node's latest counters, and a line of
the figures (docs/burnin.md)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from clusterbench.results.folder import RunFolder
from clusterbench.stages.burnin.plan import BurninPlan
from clusterbench.stages.burnin.records import BURNIN, TABLE, Burnin, NodeCounters, Window, WrongWord
from clusterbench.stages.burnin.series import MAX_POINTS, Series

KEPT = 64  # the wrong words the section keeps, of all ranks
# run.json is rewritten at most once a second however quick its saves, and no more than a fiftieth of the time
# (folder.hot_interval_s): burnin.csv holds every window at once, and a rank killed meanwhile (Ctrl-C ends the
# ranks straight after) leaves the section as of its last save.
MIN_SAVE_S = 1.0
# A fleet's soak: the points of all its devices together bounded too (a point is about 250 bytes of run.json), a
# device keeping MIN_POINTS at least, enough for a drift's two sides.
MAX_TOTAL_POINTS = 100_000
MIN_POINTS = 24


@dataclass(frozen=True)
class Report:
    """What one rank sends rank 0 each window."""

    window: Window
    wrong: list[WrongWord]
    region_bytes: int
    counters: NodeCounters | None = None  # a node's first rank's, where it read them this window


class Recorder:
    def __init__(self, folder: RunFolder, plan: BurninPlan, devices: int) -> None:
        self.folder = folder
        self.section = Burnin(plan.duration_s, plan.window_s, plan.level, tolerance=plan.tolerance)
        self.series = Series(min(MAX_POINTS, max(MIN_POINTS, MAX_TOTAL_POINTS // max(devices, 1))))
        self.counters: dict[str, NodeCounters] = {}
        self.wrong = 0

    def add(self, reports: list[Report], t_s: float) -> None:
        rows = [r.window for r in reports]
        self.folder.append_csv(TABLE, rows)
        self.series.add(rows)
        self.wrong += sum(w.wrong_words for w in rows)
        for r in reports:
            if r.counters is not None:
                self.counters[r.counters.node] = r.counters
        self.section = replace(self.section, memory_bytes=min(r.region_bytes for r in reports), elapsed_s=t_s,
                               wrong=(self.section.wrong + [w for r in reports for w in r.wrong])[:KEPT])
        self._record(max(MIN_SAVE_S, self.folder.hot_interval_s))
        print(progress_line(rows, self.section.duration_s - t_s, self.wrong), flush=True)

    def read(self, counters: NodeCounters) -> None:
        """A node's counters read apart from a window (rank 0's own, as a soak cut short ends)."""
        self.counters[counters.node] = counters

    def finish(self, elapsed_s: float, partial: bool) -> None:
        self.section = replace(self.section, elapsed_s=elapsed_s, partial=partial)
        self._record(0.0)

    def _record(self, min_interval_s: float) -> None:
        self.section = replace(self.section, windows=self.series.windows(), counters=list(self.counters.values()))
        self.folder.record(min_interval_s, **{BURNIN.name: self.section})


def clock(seconds: float) -> str:
    """12:05 or 1:02:05."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:02d}:{rest % 60:02d}"


def progress_line(rows: list[Window], left_s: float, wrong: int) -> str:
    """`# burnin 00:42 left: cpu 0.21 TFLOP/s, memory 5.1 GB/s, busbw 3.2 Gbps, 0 wrong words`: the window's
    lowest figures among its devices, and the wrong words so far."""
    def lowest(figure: str) -> float | None:
        values = [getattr(w, figure) for w in rows if getattr(w, figure) is not None]
        return min(values) if values else None

    kinds = "/".join(sorted({w.device.split(":")[0] for w in rows}))
    parts = [f"{kinds} {lowest('matmul_tflops'):.3g} TFLOP/s", f"memory {lowest('memory_gbps'):.3g} GB/s"]
    busbw = lowest("busbw_gbps")
    if busbw is not None:
        parts.append(f"busbw {busbw:.3g} Gbps")
    parts.append(f"{wrong} wrong words")
    among = f" (the lowest of {len(rows)} devices)" if len(rows) > 1 else ""
    return f"# burnin {clock(left_s)} left: {', '.join(parts)}{among}"
