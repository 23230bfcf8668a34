"""Telemetry over a run's stages: each rank's sampler, the stage windows, rank 0's record of both.

Every rank holds a Recorder; those with a device to sample run a Sampler (a GPU rank its own
GPU; on CPUs local rank 0 alone, since the ranks of a host share its CPU). At the end of each
stage every rank sends rank 0 what it sampled during it (one gather on the default group, where
all ranks meet anyway), and rank 0 rewrites telemetry.csv and the stage's summaries in run.json.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from clusterbench.errors import RunFailed
from clusterbench.hw import nvml
from clusterbench.results.folder import RunFolder
from clusterbench.runtime.devices import device_name
from clusterbench.runtime.dist import Worker
from clusterbench.telemetry.cpu import CpuProbe
from clusterbench.telemetry.gpu import GpuProbe
from clusterbench.telemetry.records import TABLE, DeviceStage, Sample, StageWindow, Telemetry
from clusterbench.telemetry.sampler import Probe, Reading, Sampler
from clusterbench.telemetry.summary import device_stage

# Samples per device and stage that travel to rank 0 for telemetry.csv and the plots: a long stage on
# many ranks would otherwise send rank 0 gigabytes. Each rank summarises all of its own samples first.
CSV_SAMPLES = 3000


@dataclass(frozen=True)
class _Part:
    """What one rank sends rank 0 at a stage's end."""

    start: float  # unix time on this rank's host
    end: float
    host: str
    device: str
    kind: str
    rank: int
    readings: list[Reading]  # at most CSV_SAMPLES, evenly thinned
    summary: DeviceStage | None  # of every reading of the stage
    note: str | None


@dataclass
class _Mark:
    name: str
    start: float
    split: bool = False  # another stage was marked inside this one, which then records nothing itself


class Recorder:
    def __init__(self, worker: Worker, folder: RunFolder | None, hz: float) -> None:
        self.worker, self.folder = worker, folder
        self._stack = contextlib.ExitStack()
        self._open: list[_Mark] = []
        self._samples: list[Sample] = []  # rank 0: every sample so far, for telemetry.csv
        member = worker.members[worker.rank] if worker.members else None
        self.host = (member.node or member.host) if member else "?"
        probe, self.device, self.kind, self.note = self._probe()
        self.hz = hz
        self.sampler = Sampler(probe, hz) if probe is not None else None
        self.telemetry: Telemetry | None = None  # rank 0, from the first stage's end

    def _probe(self) -> tuple[Probe | None, str, str, str | None]:
        """(probe or None, device label, device model, why not sampled)."""
        device = self.worker.device
        if device.type == "cpu":
            if self.worker.local_rank != 0:
                return None, "CPU", "", None  # local rank 0 samples the CPU it shares with us
            return CpuProbe(), "CPU", device_name(device), None
        if device.type != "cuda":
            return None, str(device), "", f"{device.type} devices are not sampled: NVML and /proc only"
        session, why = self._stack.enter_context(nvml.session())
        if session is None:
            return None, str(device), "", f"GPUs not sampled: {why}"
        handle = nvml.handle_of(session, str(torch.cuda.get_device_properties(device).uuid))
        if handle is None:
            return None, str(device), "", f"GPUs not sampled: NVML knows no GPU with {device}'s UUID"
        index = nvml.call(session, "nvmlDeviceGetIndex", handle)
        probe = GpuProbe(session, handle)
        self._stack.callback(probe.close)
        name = nvml.text(nvml.call(session, "nvmlDeviceGetName", handle)) or device_name(device)
        return probe, f"GPU{index}" if index is not None else str(device), name, None

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        for outer in self._open:
            outer.split = True
        mark = _Mark(name, time.time())
        self._open.append(mark)
        try:
            yield
        except BaseException:
            self._open.pop()
            # The other ranks may be gone: rank 0 keeps what it sampled itself, without asking them.
            if not mark.split and self.folder is not None:
                with contextlib.suppress(RunFailed):  # the stage's own error is the one to report
                    self._record(name, [self._part(mark)])
            raise
        self._open.pop()
        if not mark.split:
            parts: list[Any] | None = [None] * self.worker.world_size if self.worker.rank == 0 else None
            dist.gather_object(self._part(mark), parts, dst=0)
            if self.folder is not None:
                self._record(name, parts)

    def _part(self, mark: _Mark) -> _Part:
        readings = self.sampler.take(mark.start, time.time()) if self.sampler is not None else []
        if self.sampler is not None and not readings:  # shorter than the sampling period: one reading of it
            readings = [r for r in [self.sampler.read_now()] if r is not None]
        end = time.time()
        note = self.sampler.error if self.sampler is not None and self.sampler.error else self.note
        samples = [self._sample(mark.name, t, figures) for t, figures in readings]
        summary = device_stage(self.kind, samples) if samples else None
        step = -(-len(readings) // CSV_SAMPLES)  # ceil: keeps at most CSV_SAMPLES
        return _Part(mark.start, end, self.host, self.device, self.kind, self.worker.rank, readings[::max(step, 1)],
                     summary, note)

    def _sample(self, stage: str, t_s: float, figures: dict[str, Any]) -> Sample:
        return Sample(t_s, stage, self.host, self.device, self.worker.rank, **figures)

    def _record(self, name: str, parts: list[_Part]) -> None:
        """Rank 0: the stage's window and summaries into run.json, its samples onto telemetry.csv."""
        if self.telemetry is None:  # the run's clock starts with its first stage
            self.telemetry = Telemetry(hz=self.hz, t0_unix=min(p.start for p in parts))
        t0 = self.telemetry.t0_unix
        self.telemetry.stages.append(StageWindow(name, min(p.start for p in parts) - t0,
                                                 max(p.end for p in parts) - t0))
        for p in parts:
            if p.note and f"{p.host}: {p.note}" not in self.telemetry.notes:
                self.telemetry.notes.append(f"{p.host}: {p.note}")
            if p.summary is not None:
                self.telemetry.devices.append(p.summary)
                self._samples += [Sample(t - t0, name, p.host, p.device, p.rank, **figures)
                                  for t, figures in p.readings]
        if self._samples:
            self.folder.write_csv(TABLE, self._samples)
        self.folder.record(telemetry=self.telemetry)

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        self._stack.close()


def start(worker: Worker, folder: RunFolder | None, hz: float) -> Recorder | None:
    """Every rank's recorder (folder: rank 0's), or None when telemetry is off (hz 0)."""
    return Recorder(worker, folder, hz) if hz > 0 else None
