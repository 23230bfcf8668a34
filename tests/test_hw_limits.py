"""The tables of REFERENCE.md §2-§3 as limits.py holds them."""

import pytest

from clusterbench import limits


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A100 80GB PCIe", 312.0),
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 SXM5 80GB", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA H20", 148.0),
        ("NVIDIA B200", 2250.0),
        ("NVIDIA L40S", 362.0),
        ("AMD Instinct MI300X", 1300.0),
        # Near misses must not borrow a neighbour's figure.
        ("NVIDIA H100", None),
        ("NVIDIA H100 NVL", None),
        ("NVIDIA H200 NVL", None),
        ("NVIDIA GB200", None),
        ("NVIDIA L40", None),
        ("AMD Instinct MI300A", None),
        ("Tesla T4", None),
        ("", None),
    ],
)
def test_peak_bf16_by_device_name(name: str, expected: float | None) -> None:
    assert limits.peak_tflops(name, "bfloat16") == expected


def test_peak_fp16_equals_bf16_and_other_dtypes_are_unknown() -> None:
    for dtype in ("bfloat16", "bf16", "float16", "fp16", "torch.bfloat16"):
        assert limits.peak_tflops("NVIDIA H200", dtype) == 989.0
    for dtype in ("float32", "tf32", "fp8", "int8"):
        assert limits.peak_tflops("NVIDIA H200", dtype) is None


def test_nvlink_per_gpu_figures_match_reference() -> None:
    assert {gen: row.per_gpu_gbps for gen, row in limits.NVLINK.items()} == {
        2: 150.0, 3: 300.0, 4: 450.0, 5: 900.0,
    }
    assert "370" in limits.NVLINK[4].note
    for gen, row in limits.NVLINK.items():
        assert limits.nvlink_gbps(gen, row.links) == row.per_gpu_gbps


def test_nvlink_scales_with_active_links_and_rejects_unknown() -> None:
    assert limits.nvlink_gbps(4, 12) == 300.0
    assert limits.nvlink_gbps(5, 9) == 450.0
    assert limits.nvlink_gbps(4, 0) == 0.0
    assert limits.nvlink_gbps(1, 4) is None
    assert limits.nvlink_gbps(6, 18) is None
    assert limits.nvlink_gbps(4, -1) is None


@pytest.mark.parametrize(
    ("gen", "width", "expected"),
    [
        (3, 16, 15.75), (4, 16, 31.5), (5, 16, 63.0), (6, 16, 121.0),
        (4, 8, 15.75), (5, 4, 15.75), (1, 16, 4.0),
        (7, 16, None), (0, 16, None), (4, 0, None),
    ],
)
def test_pcie(gen: int, width: int, expected: float | None) -> None:
    assert limits.pcie_gbps(gen, width) == expected


def test_nic_rates() -> None:
    assert [limits.nic_gbps("InfiniBand", r) for r in (200, 400, 800)] == [25.0, 50.0, 100.0]
    assert [limits.nic_gbps("Ethernet", r) for r in (100, 200, 400)] == [12.5, 25.0, 50.0]
    assert limits.nic_label("InfiniBand", 400) == "IB NDR"
    assert limits.nic_label("Ethernet", 200) == "RoCE 200GbE"
    assert limits.nic_label("InfiniBand", 56) == "IB 56 Gb/s"
    with pytest.raises(ValueError, match="link layer"):
        limits.nic_gbps("OmniPath", 100)
