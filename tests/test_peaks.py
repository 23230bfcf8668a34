"""Measured peaks on the CPU, with sizes small enough to stay fast."""

import pytest
import torch

from clusterbench.errors import UsageError
from clusterbench.hw import peaks


def test_matmul_float32_on_cpu() -> None:
    result = peaks.measure_matmul_tflops("cpu", "float32", n=128, seconds=0.05)
    assert result.device == "cpu"
    assert result.dtype == "float32"
    assert result.n == 128
    assert result.iters >= 1
    assert result.seconds >= 0.05
    assert result.tflops > 0


def test_matmul_bfloat16_on_cpu_is_allowed() -> None:
    result = peaks.measure_matmul_tflops("cpu", "bf16", n=32, seconds=0.01)
    assert result.dtype == "bfloat16"
    assert result.tflops > 0


def test_copy_on_cpu_counts_read_and_write() -> None:
    result = peaks.measure_copy_gbps("cpu", nbytes=1 << 20, seconds=0.05)
    assert result.nbytes == 1 << 20
    assert result.gbps > 0
    expected = 2 * result.nbytes * result.iters / result.seconds / 1e9
    assert result.gbps == pytest.approx(expected)


def test_unsupported_dtype_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unsupported dtype 'int8'"):
        peaks.measure_matmul_tflops("cpu", "int8", n=8)


def test_bad_device_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="device"):
        peaks.measure_copy_gbps("nonsense", nbytes=8)
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="no CUDA GPU"):
            peaks.measure_matmul_tflops("cuda", n=8)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_busy_gpus_without_cuda_keeps_nothing_busy() -> None:
    with peaks.busy_gpus() as busy:
        assert busy == set()


def test_a_device_that_measured_nothing_leaves_the_minimum_unknown() -> None:
    from clusterbench.results.run import Run
    from clusterbench.stages.peaks.records import CopyPeak, MatmulPeak, Peaks
    from clusterbench.stages.registry import metrics_of

    matmul = [MatmulPeak(f"cuda:{i}", "bfloat16", 4096, t, 10, 1.0) for i, t in enumerate((float("nan"), 700.0))]
    copy = [CopyPeak(f"cuda:{i}", 1 << 30, g, 10, 1.0) for i, g in enumerate((2000.0, float("nan")))]
    m = metrics_of(Run(command="peak", sections={"peaks": Peaks(matmul, copy)}))
    for name in ("peaks.matmul.bfloat16.tflops", "peaks.copy.gbps"):
        assert name not in m.values and "not a measurement" in m.absent[name]
