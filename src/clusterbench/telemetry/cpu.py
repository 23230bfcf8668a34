"""The host CPU's telemetry from /proc and /sys, in the same figures as a GPU's.

clock: the mean current frequency of the cores this process may run on (cpufreq's
scaling_cur_freq, else /proc/cpuinfo's "cpu MHz"); util: their busy share from /proc/stat
deltas; temperature: the hottest CPU thermal zone; power: RAPL package energy deltas (most
kernels let only root read them). What the OS does not expose is None.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from clusterbench.hw.affinity import allowed_cpus
from clusterbench.hw.host import read

_CPU_ZONES = ("x86_pkg_temp", "cpu", "soc")  # thermal zone types that measure the CPU


class CpuProbe:
    def __init__(self, root: Path = Path("/"), cores: list[int] | None = None) -> None:
        self.root = root
        self.cores = sorted(cores if cores is not None else allowed_cpus())
        freq = [root / f"sys/devices/system/cpu/cpu{c}/cpufreq/scaling_cur_freq" for c in self.cores]
        self._freq_files = [f for f in freq if f.exists()]
        self._zones = [z / "temp" for z in sorted((root / "sys/class/thermal").glob("thermal_zone*"))
                       if any(kind in _text(z / "type").lower() for kind in _CPU_ZONES)]
        self._rapl = [d for d in sorted((root / "sys/class/powercap").glob("intel-rapl:*"))
                      if d.name.count(":") == 1 and _number(d / "energy_uj") is not None]  # packages, not their parts
        self._last_stat = self._stat()
        self._last_energy = (time.monotonic(), self._energy())

    def read(self) -> dict[str, Any]:
        return {"clock_mhz": self._clock(), "util_pct": self._util(), "temperature_c": self._temperature(),
                "power_w": self._power()}

    def _clock(self) -> float | None:
        if self._freq_files:
            khz = [v for v in map(_number, self._freq_files) if v is not None]
            return sum(khz) / len(khz) / 1000 if khz else None
        mhz = _cpuinfo_mhz(_text(self.root / "proc/cpuinfo"))
        mine = [mhz[c] for c in self.cores if c in mhz]
        return sum(mine) / len(mine) if mine else None

    def _stat(self) -> tuple[float, float] | None:
        """(busy, total) jiffies of our cores; idle and iowait are not busy."""
        busy = total = 0.0
        wanted = {f"cpu{c}" for c in self.cores}
        for line in _text(self.root / "proc/stat").splitlines():
            words = line.split()
            if words and words[0] in wanted and len(words) >= 6:
                counts = [float(t) for t in words[1:9]]  # guest time is already inside user
                total += sum(counts)
                busy += sum(counts) - counts[3] - counts[4]
        return (busy, total) if total else None

    def _util(self) -> float | None:
        now, last = self._stat(), self._last_stat
        self._last_stat = now
        if now is None or last is None or now[1] <= last[1]:
            return None
        return 100 * (now[0] - last[0]) / (now[1] - last[1])

    def _temperature(self) -> float | None:
        millideg = [v for v in map(_number, self._zones) if v is not None]
        return max(millideg) / 1000 if millideg else None

    def _energy(self) -> float | None:
        """µJ of all packages together."""
        if not self._rapl:
            return None
        total = 0.0
        for package in self._rapl:
            value = _number(package / "energy_uj")
            if value is None:
                return None
            total += value
        return total

    def _power(self) -> float | None:
        now = (time.monotonic(), self._energy())
        last, self._last_energy = self._last_energy, now
        if now[1] is None or last[1] is None or now[0] <= last[0]:
            return None
        delta = now[1] - last[1]
        if delta < 0:  # a package's counter wrapped: this interval is lost, the next one is whole
            return None
        return delta / 1e6 / (now[0] - last[0])


def _cpuinfo_mhz(text: str) -> dict[int, float]:
    mhz: dict[int, float] = {}
    processor = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        try:
            if key == "processor":
                processor = int(value)
            elif key == "cpu MHz" and processor is not None:
                mhz[processor] = float(value)
        except ValueError:
            continue
    return mhz


def _text(path: Path) -> str:
    return read(path) or ""


def _number(path: Path) -> float | None:
    try:
        return float(_text(path))
    except ValueError:
        return None
