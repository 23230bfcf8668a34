"""One GPU's telemetry read through NVML: a probe the sampler calls at its rate.

Every figure NVML cannot answer (an older driver, a GPU without NVLink or ECC, a call a
container forbids) is None; nothing here raises.
"""

from __future__ import annotations

import time
from typing import Any

from clusterbench.hw.nvml import call

# NVML C enum values (a stable ABI), kept literal so a fake NVML needs no constants.
_CLOCK_SM, _CLOCK_MEM = 1, 2  # nvmlClockType_t
_TEMPERATURE_GPU = 0  # nvmlTemperatureSensors_t
_PCIE_TX_BYTES, _PCIE_RX_BYTES = 0, 1  # nvmlPcieUtilCounter_t
_ECC_CORRECTED, _ECC_UNCORRECTED, _ECC_VOLATILE = 0, 1, 0  # nvmlMemoryErrorType_t, nvmlEccCounterType_t
_FI_NVLINK_DATA_TX, _FI_NVLINK_DATA_RX = 138, 139  # field ids: KiB through one link (scope) since boot
_XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError
_SUCCESS, _FEATURE_ENABLED = 0, 1
_XIDS_PER_READ = 16  # a storm of XIDs must not hold the sampler in one tick
# nvmlClocksEventReasons bits. Idle, application clocks, sync boost and display clocks are the
# GPU doing what it was told; the rest slow it against its will.
REASONS = {0x1: "gpu_idle", 0x2: "app_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
           0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
           0x100: "display_clocks_setting"}


def reasons(mask: int) -> list[str]:
    """The names of the bits set in a clock-event mask; an unknown bit keeps its value."""
    names = [name for bit, name in REASONS.items() if mask & bit]
    rest = mask & ~sum(REASONS)
    return names + ([f"0x{rest:x}"] if rest else [])


class GpuProbe:
    """Reads one GPU; holds the NVML event set and the counters rates are taken from."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml, self.handle = nvml, handle
        links = range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 0))
        self._links = [link for link in links
                       if call(nvml, "nvmlDeviceGetNvLinkState", handle, link) == _FEATURE_ENABLED]
        self._nvlink_last: tuple[float, int, int] | None = None
        self._events = self._xid_events()

    def _xid_events(self) -> Any:
        """An NVML event set that collects this GPU's XIDs, or None where NVML will not give one."""
        events = call(self.nvml, "nvmlEventSetCreate")
        if events is None:
            return None
        try:  # answers None when it works, so call() cannot tell success from failure
            self.nvml.nvmlDeviceRegisterEvents(self.handle, _XID_CRITICAL_ERROR, events)
        except (self.nvml.NVMLError, AttributeError):
            call(self.nvml, "nvmlEventSetFree", events)
            return None
        return events

    def read(self) -> dict[str, Any]:
        nvml, h = self.nvml, self.handle
        power_mw = call(nvml, "nvmlDeviceGetPowerUsage", h)
        util = call(nvml, "nvmlDeviceGetUtilizationRates", h)
        tx, rx = (call(nvml, "nvmlDeviceGetPcieThroughput", h, c) for c in (_PCIE_TX_BYTES, _PCIE_RX_BYTES))
        nvlink_tx, nvlink_rx = self._nvlink_rates()
        return {
            "clock_mhz": call(nvml, "nvmlDeviceGetClockInfo", h, _CLOCK_SM),
            "mem_clock_mhz": call(nvml, "nvmlDeviceGetClockInfo", h, _CLOCK_MEM),
            "power_w": power_mw / 1000 if power_mw is not None else None,
            "temperature_c": call(nvml, "nvmlDeviceGetTemperature", h, _TEMPERATURE_GPU),
            "util_pct": util.gpu if util is not None else None,
            "mem_util_pct": util.memory if util is not None else None,
            # NVML answers KB/s (1000 bytes) over its last 20 ms.
            "pcie_tx_mbps": tx / 1000 if tx is not None else None,
            "pcie_rx_mbps": rx / 1000 if rx is not None else None,
            "nvlink_tx_mbps": nvlink_tx,
            "nvlink_rx_mbps": nvlink_rx,
            "ecc_corrected": call(nvml, "nvmlDeviceGetTotalEccErrors", h, _ECC_CORRECTED, _ECC_VOLATILE),
            "ecc_uncorrected": call(nvml, "nvmlDeviceGetTotalEccErrors", h, _ECC_UNCORRECTED, _ECC_VOLATILE),
            "xid": self._xids(),
            "throttle": self._throttle(),
        }

    def _throttle(self) -> str | None:
        # Drivers before r535 know only the older name of the same call.
        mask = call(self.nvml, "nvmlDeviceGetCurrentClocksEventReasons", self.handle)
        if mask is None:
            mask = call(self.nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", self.handle)
        return None if mask is None else "+".join(reasons(mask)) or "none"

    def _nvlink_rates(self) -> tuple[float | None, float | None]:
        """MB/s over all links since the previous read, from NVML's running KiB counters."""
        if not self._links:
            return None, None
        ids = [(field, link) for field in (_FI_NVLINK_DATA_TX, _FI_NVLINK_DATA_RX) for link in self._links]
        values = call(self.nvml, "nvmlDeviceGetFieldValues", self.handle, ids)
        if values is None or any(v.nvmlReturn != _SUCCESS for v in values):
            return None, None
        n = len(self._links)
        now = time.monotonic()
        tx, rx = (sum(v.value.ullVal for v in values[:n]), sum(v.value.ullVal for v in values[n:]))
        last, self._nvlink_last = self._nvlink_last, (now, tx, rx)
        if last is None or now <= last[0]:
            return None, None
        seconds = now - last[0]
        return (tx - last[1]) * 1024 / 1e6 / seconds, (rx - last[2]) * 1024 / 1e6 / seconds

    def _xids(self) -> int | None:
        """XID events since the previous read (waiting 0 ms for them), or None where NVML cannot tell."""
        if self._events is None:
            return None
        seen = 0
        while seen < _XIDS_PER_READ and call(self.nvml, "nvmlEventSetWait_v2", self._events, 0) is not None:
            seen += 1  # NVMLError Timeout (None here): no more events
        return seen

    def close(self) -> None:
        call(self.nvml, "nvmlEventSetFree", self._events)
