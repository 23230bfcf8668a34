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
        self.unsupported = set(unsupported)  # (function name, gpu index) pairs
        self.count = len(pcie)

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

