"""A fake pynvml for tests: the slice clusterbench.hw uses, answering for a made-up machine."""

from types import SimpleNamespace


class FakeNvmlError(Exception):
    pass


class FakeNvml:
    """The slice of pynvml that clusterbench.hw uses, answering for a made-up machine.

    `peers` maps a GPU to {link: remote GPU index, or "switch"}; every other link up to
    `links_per_gpu` exists but is inactive. `levels` holds nvmlGpuTopologyLevel_t values
    per unordered pair. `pcie` holds (cur gen, cur width, max gen, max width) per GPU.
    """

    NVMLError = FakeNvmlError
    NVML_NVLINK_MAX_LINKS = 36  # more than the GPUs have: the rest must be skipped

    def __init__(self, name, peers, levels, pcie, links_per_gpu=18, unsupported=()):
        self.name, self.peers, self.levels, self.pcie = name, peers, levels, pcie
        self.links_per_gpu = links_per_gpu
        self.unsupported = set(unsupported)  # (function name, gpu index or None) pairs
        self.count = len(pcie)
        # Telemetry: what each GPU reads now; a test changes it between reads.
        self.power_mw = dict.fromkeys(range(self.count), 650_000)
        self.sm_mhz = dict.fromkeys(range(self.count), 1980)
        self.reasons = dict.fromkeys(range(self.count), 0)  # nvmlClocksEventReasons bits
        self.ecc = {gpu: [0, 0] for gpu in range(self.count)}  # [corrected, uncorrected]
        self.nvlink_kib = dict.fromkeys(range(self.count), 0)  # running counter per link, both directions
        self.xids = []  # (gpu, xid) waiting to be read from an event set
        self._registered = set()

    def _check(self, function, gpu):
        if (function, gpu) in self.unsupported:
            raise FakeNvmlError("Not Supported")

    def _link(self, gpu, link):
        if link >= self.links_per_gpu:
            raise FakeNvmlError("Invalid Argument")
        return self.peers.get(gpu, {}).get(link)

    @staticmethod
    def _bus_id(gpu):
        return f"00000000:{0x18 + gpu:02X}:00.0".encode()

    def nvmlInit(self): pass
    def nvmlShutdown(self): pass
    def nvmlSystemGetDriverVersion(self): return "550.54.15"
    def nvmlDeviceGetCount(self): return self.count
    def nvmlDeviceGetHandleByIndex(self, i): return i
    def nvmlDeviceGetName(self, h): return self.name
    def nvmlDeviceGetUUID(self, h): return f"GPU-0000000{h}-0000-0000-0000-000000000000"
    def nvmlDeviceGetHandleByUUID(self, uuid): return int(uuid.removeprefix("GPU-")[7])
    def nvmlDeviceGetPciInfo(self, h): return SimpleNamespace(busId=self._bus_id(h))

    def nvmlDeviceGetMemoryInfo(self, h):
        self._check("nvmlDeviceGetMemoryInfo", h)
        return SimpleNamespace(total=80 * 2**30)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h): return self.pcie[h][0]
    def nvmlDeviceGetCurrPcieLinkWidth(self, h): return self.pcie[h][1]
    def nvmlDeviceGetMaxPcieLinkGeneration(self, h): return self.pcie[h][2]
    def nvmlDeviceGetMaxPcieLinkWidth(self, h): return self.pcie[h][3]

    def nvmlDeviceGetNvLinkState(self, h, link):
        self._check("nvmlDeviceGetNvLinkState", h)
        return 0 if self._link(h, link) is None else 1

    def nvmlDeviceGetNvLinkVersion(self, h, link):
        self._link(h, link)
        return 6  # nvmlNvlinkVersion_t for NVLink 4.0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        peer = self._link(h, link)
        bus = b"00000000:C0:00.0" if peer == "switch" else self._bus_id(peer)
        return SimpleNamespace(busId=bus)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        return 2 if self._link(h, link) == "switch" else 0

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return self.levels[frozenset((a, b))]

    # Telemetry: every call can be made unsupported per GPU through `unsupported`.
    def nvmlDeviceGetIndex(self, h): return h

    def nvmlDeviceGetPowerUsage(self, h):
        self._check("nvmlDeviceGetPowerUsage", h)
        return self.power_mw[h]

    def nvmlDeviceGetClockInfo(self, h, clock):
        self._check("nvmlDeviceGetClockInfo", h)
        return {1: self.sm_mhz[h], 2: 2619}[clock]  # NVML_CLOCK_SM, NVML_CLOCK_MEM

    def nvmlDeviceGetTemperature(self, h, sensor):
        self._check("nvmlDeviceGetTemperature", h)
        return 61

    def nvmlDeviceGetUtilizationRates(self, h):
        self._check("nvmlDeviceGetUtilizationRates", h)
        return SimpleNamespace(gpu=97, memory=41)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        self._check("nvmlDeviceGetCurrentClocksEventReasons", h)
        return self.reasons[h]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        self._check("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        return self.reasons[h]

    def nvmlDeviceGetPcieThroughput(self, h, counter):
        self._check("nvmlDeviceGetPcieThroughput", h)
        return {0: 12_000, 1: 3_000}[counter]  # KB/s: TX, RX

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter_type):
        self._check("nvmlDeviceGetTotalEccErrors", h)
        return self.ecc[h][error_type]

    def nvmlDeviceGetFieldValues(self, h, field_ids):
        self._check("nvmlDeviceGetFieldValues", h)
        return [SimpleNamespace(fieldId=f, scopeId=link, nvmlReturn=0, value=SimpleNamespace(ullVal=self.nvlink_kib[h]))
                for f, link in field_ids]

    def nvmlEventSetCreate(self):
        self._check("nvmlEventSetCreate", None)
        return "event set"

    def nvmlDeviceRegisterEvents(self, h, types, events):
        self._check("nvmlDeviceRegisterEvents", h)
        self._registered.add(h)

    def nvmlEventSetWait_v2(self, events, timeout_ms):
        waiting = [x for x in self.xids if x[0] in self._registered]
        if not waiting:
            raise FakeNvmlError("Timeout")
        self.xids.remove(waiting[0])
        return SimpleNamespace(device=waiting[0][0], eventType=0x8, eventData=waiting[0][1])

    def nvmlEventSetFree(self, events): pass


NODE, SYS, PHB = 40, 50, 30


def four_h100() -> FakeNvml:
    """GPU0-GPU1 and GPU2-GPU3 joined by 4 NVLinks each; GPU3's PCIe at gen 4 of 5."""
    pairs = {(0, 1): PHB, (2, 3): PHB, (0, 2): NODE, (1, 3): NODE, (0, 3): SYS, (1, 2): SYS}
    return FakeNvml(
        name="NVIDIA H100 80GB HBM3",
        peers={0: dict.fromkeys(range(4), 1), 1: dict.fromkeys(range(4), 0),
               2: dict.fromkeys(range(4), 3), 3: dict.fromkeys(range(4), 2)},
        levels={frozenset(pair): level for pair, level in pairs.items()},
        pcie=[(5, 16, 5, 16)] * 3 + [(4, 16, 5, 16)],
        unsupported={("nvmlDeviceGetMemoryInfo", 2)},
    )


def eight_h200() -> FakeNvml:
    """Eight H200s behind NVSwitches (18 links each), two NUMA nodes of four."""
    def level(a: int, b: int) -> int:
        return NODE if a // 4 == b // 4 else SYS

    return FakeNvml(
        name="NVIDIA H200",
        peers={gpu: dict.fromkeys(range(18), "switch") for gpu in range(8)},
        levels={frozenset((a, b)): level(a, b) for a in range(8) for b in range(8) if a != b},
        pcie=[(5, 16, 5, 16)] * 8,
    )

