"""A thread that reads one device at a fixed rate and keeps the readings until a stage takes them."""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

from clusterbench.errors import one_line

DEFAULT_HZ = 10.0
MAX_HZ = 100.0  # NVML's own counters update every 20 ms or more; faster sampling only costs CPU
Reading = tuple[float, dict[str, Any]]  # (unix time, figures named as Sample's fields)


class Probe(Protocol):
    def read(self) -> dict[str, Any]: ...


class Sampler:
    def __init__(self, probe: Probe, hz: float) -> None:
        self.probe = probe
        self.period_s = 1 / hz
        self.error: str | None = None  # why sampling stopped early
        self._readings: list[Reading] = []
        self._lock = threading.Lock()
        self._probing = threading.Lock()
        self._stop = threading.Event()
        # A daemon: a rank that ends by an error must never wait on its sampler.
        self._thread = threading.Thread(target=self._run, name="clusterbench-telemetry", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        due = time.monotonic()
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            reading = self._read()
            if reading is None:
                return
            with self._lock:
                self._readings.append(reading)
            # Behind (a slow NVML call): skip the missed ticks rather than catch up in a burst.
            due = max(due + self.period_s, time.monotonic())

    def _read(self, wait: bool = True) -> Reading | None:
        # The thread and read_now share one probe, whose counters keep state. read_now never waits: the
        # thread holding the probe may be stuck in a sick GPU's driver, and the rank must not be.
        if not self._probing.acquire(blocking=wait):
            return None
        try:
            return time.time(), self.probe.read()
        except Exception as e:  # a probe's fault must cost the telemetry, never the benchmark
            self.error = f"sampling stopped: {one_line(e)}"
            self._stop.set()
            return None
        finally:
            self._probing.release()

    def read_now(self) -> Reading | None:
        """One reading at once, for a stage shorter than the period; None when the probe is busy or has failed."""
        return None if self.error else self._read(wait=False)

    def take(self, start: float, end: float) -> list[Reading]:
        """The readings taken from `start` to `end` (unix times); older ones are dropped, later ones kept."""
        with self._lock:
            taken = [r for r in self._readings if start <= r[0] <= end]
            self._readings = [r for r in self._readings if r[0] > end]
        return taken

    def stop(self) -> None:
        self._stop.set()
        # A probe stuck in a sick GPU's driver must not hold the rank's exit: the thread is a daemon.
        self._thread.join(timeout=max(1.0, 3 * self.period_s))
