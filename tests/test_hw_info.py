"""describe() and render(): on this host as it is, and with NVML faked at its one boundary."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
from fake_nvml import SYS, FakeNvml, FakeNvmlError, four_h100

from clusterbench.hw import gpus, network, nvml, topology
from clusterbench.hw.render import render
from clusterbench.results import codec
from clusterbench.stages.hardware.records import PcieLink


def test_fake_uses_real_pynvml_names() -> None:
    pynvml = pytest.importorskip("pynvml")
    names = [n for n in dir(FakeNvml) if n.startswith(("nvml", "NVML"))]
    assert [n for n in names if not hasattr(pynvml, n)] == []
    assert all(hasattr(pynvml, n) for n in gpus.PCIE_CALLS)


def test_describe_this_host_without_gpu() -> None:
    info = topology.describe()
    json.dumps(codec.dump(info))
    assert info.gpus == [] and info.gpu_topology == []
    assert info.gpu_note.startswith("no GPU (")
    assert info.cpu.model and info.cpu.logical_cores >= 1
    assert info.memory_bytes > 0
    assert info.versions["torch"]
    assert "no GPU" in render(info)


def test_describe_when_nvml_cannot_start(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = four_h100()

    def fail() -> None:
        raise FakeNvmlError("Driver Not Loaded")

    fake.nvmlInit = fail
    monkeypatch.setattr(nvml, "load", lambda: fake)
    info = topology.describe()
    assert info.gpus == []
    assert info.gpu_note == "no GPU (NVML could not start: Driver Not Loaded)"

    monkeypatch.setattr(nvml, "load", lambda: None)
    assert topology.describe().gpu_note == "no GPU (nvidia-ml-py is not installed)"


def test_four_gpus_with_nvlink_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml, "load", four_h100)
    info = topology.describe()
    json.dumps(codec.dump(info))
    assert info.gpu_note is None
    assert info.versions["driver"] == "550.54.15"
    assert info.gpu_topology == [
        ["X", "NV4", "NODE", "SYS"],
        ["NV4", "X", "SYS", "NODE"],
        ["NODE", "SYS", "X", "NV4"],
        ["SYS", "NODE", "NV4", "X"],
    ]
    gpu0, _, gpu2, gpu3 = info.gpus
    assert gpu0.bus_id == "0000:18:00.0"
    assert len(gpu0.nvlink_links) == 18  # links 18..35 answer Invalid Argument
    assert (gpu0.nvlink_active, gpu0.nvlink_version, gpu0.nvlink_gbps) == (4, 4, 100.0)
    assert gpu0.peak_bf16_tflops == 989.0
    assert gpu0.memory_bytes == 80 * 2**30
    assert gpu2.memory_bytes is None  # NotSupported for that one field only
    assert gpu0.pcie.gbps == 63.0 and gpu0.pcie.downtrained is False
    assert gpu3.pcie.gbps == 63.0 and gpu3.pcie.gbps_current == 31.5
    assert gpu3.pcie.downtrained is True and gpu3.pcie.under_load is False
    assert "idle" in gpu3.pcie.note

    text = render(info)
    assert "GPU0 NVIDIA H100 80GB HBM3  80.0 GiB  PCIe gen5 x16 (max gen5 x16, 63 GB/s)" in text
    assert "NVLink4 x4 100 GB/s  bf16 peak 989 TFLOP/s" in text
    assert "PCIe gen4 x16 (max gen5 x16, 63 GB/s) below max at idle" in text
    assert "GPU0  GPU1  GPU2  GPU3  NUMA" in text
    assert "GPU3     SYS  NODE   NV4     X  -" in text


def test_nvswitch_gives_every_pair_all_links(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(
        name="NVIDIA H200",
        peers={0: dict.fromkeys(range(18), "switch"), 1: dict.fromkeys(range(18), "switch")},
        levels={frozenset((0, 1)): SYS},
        pcie=[(1, 16, 5, 16), (5, 16, 5, 16)],
        unsupported={("nvmlDeviceGetNvLinkState", 1)},
    )
    monkeypatch.setattr(nvml, "load", lambda: fake)
    info = topology.describe()
    gpus = info.gpus
    assert gpus[0].nvlink_gbps == 450.0
    # GPU1 cannot report its links: the pair falls back to the PCIe path.
    assert gpus[1].nvlink_links == [] and gpus[1].nvlink_gbps is None
    assert info.gpu_topology[0][1] == "SYS"

    fake.unsupported = set()
    info = topology.describe(pcie_load=True)  # no CUDA here: readings stay idle ones
    assert info.gpu_topology == [["X", "NV18"], ["NV18", "X"]]
    assert info.gpus[0].pcie.under_load is False
    assert info.gpus[0].pcie.gen_current == 1


def test_rdma_ports_from_sysfs(tmp_path: Path) -> None:
    for dev, layer, rate in (("mlx5_0", "InfiniBand", "400 Gb/sec (4X NDR)"),
                             ("mlx5_1", "Ethernet", "200 Gb/sec (2X HDR)")):
        port = tmp_path / dev / "ports" / "1"
        port.mkdir(parents=True)
        (port / "rate").write_text(rate + "\n")
        (port / "link_layer").write_text(layer + "\n")
        (port / "state").write_text("4: ACTIVE\n")
    ib, roce = network.rdma_ports(tmp_path)
    assert (ib.kind, ib.state, ib.rate_gbit, ib.gbps, ib.label) == ("InfiniBand", "ACTIVE", 400.0, 50.0, "IB NDR")
    assert (roce.kind, roce.gbps, roce.label) == ("RoCE", 25.0, "RoCE 200GbE")
    info = replace(topology.describe(), rdma=[ib, roce])
    assert "rdma mlx5_0/1 InfiniBand ACTIVE IB NDR 50 GB/s" in render(info)


def test_a_rank_s_loaded_reading_replaces_only_its_own_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rank reads its own GPU under load; rank 0 merges the readings by UUID."""
    monkeypatch.setattr(nvml, "load", four_h100)
    info = topology.describe()
    loaded = PcieLink(gen_current=5, width_current=16, gen_max=5, width_max=16, gbps=63.0, downtrained=False,
                      under_load=True)
    torch_uuid = info.gpus[3].uuid.removeprefix("GPU-")  # torch spells it without NVML's prefix
    merged = topology.with_pcie_readings(info, {torch_uuid: loaded})
    assert merged.gpus[3].pcie == loaded
    assert [g.pcie for g in merged.gpus[:3]] == [g.pcie for g in info.gpus[:3]]
    assert nvml.handle_of(four_h100(), torch_uuid) == 3
    # Without CUDA no rank can load its GPU: the reading is refused, never an idle one passed off as loaded.
    assert topology.own_pcie_under_load(3, torch_uuid) is None
