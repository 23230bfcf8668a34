"""Alignment figures (REFERENCE.md §5), the noise band, and the out-of-memory message."""

from __future__ import annotations

import pytest
import torch

from clusterbench.stages.train import alignment
from clusterbench.stages.train.loop import LoopConfig, out_of_memory


def test_figures_follow_reference_section_5() -> None:
    ref = [4.0] * 100
    run = [4.0 + (0.04 if i == 0 else 0.0) + (0.08 if i >= 20 else 0.0) for i in range(100)]
    a = alignment.compare(run, ref, alignment.Limits(variance=1.0, mre=0.05), 100, "r")
    assert a.variance == pytest.approx((0.04**2 + 80 * 0.08**2) / 100)
    assert a.mre == pytest.approx(0.02) and a.mre_window == (21, 100)
    assert a.max_abs_dev == pytest.approx(0.08) and a.first_step_error == pytest.approx(0.01)
    assert a.verdict == "PASS"
    a = alignment.compare(run, ref, alignment.Limits(variance=1.0, mre=0.02), 100, "r")
    assert a.verdict == "FAIL" and "MRE" in a.reasons[0]  # the limit is strict: MRE < limit


def test_short_curves_average_every_step() -> None:
    assert alignment.mre_window(10) == (1, 10) and alignment.mre_window(30) == (21, 30)
    assert alignment.mre_window(500) == (21, 100)


def test_noise_band_is_megatron_rule() -> None:
    assert alignment.noise_band([[2.0, 2.0], [2.0, 2.0]]) == (0.0, 0.001)
    dev, band = alignment.noise_band([[2.0, 4.0], [2.1, 4.0], [2.0, 3.9]])
    assert dev == pytest.approx(0.05) and band == pytest.approx(0.075)
    limits = alignment.limits_for([2.0, 4.0], band)
    assert limits.mre == pytest.approx(0.075)
    assert limits.variance == pytest.approx(((0.075 * 2) ** 2 + (0.075 * 4) ** 2) / 2)
    assert alignment.limits_for([2.0], 0.001, variance=5.0, mre=0.5) == alignment.Limits(5.0, 0.5)


def test_nan_and_short_runs_fail() -> None:
    a = alignment.compare([3.0, float("nan")], [3.0, 3.0, 3.0], alignment.Limits(1.0, 1.0), 3, "r")
    assert a.verdict == "FAIL" and a.variance is None
    assert any("nan at step 2" in r for r in a.reasons) and any("2 of 3" in r for r in a.reasons)
    # run.json writes a loss that was not finite as null: read back, it is judged the same.
    assert alignment.compare([3.0, None], [3.0, 3.0, 3.0], alignment.Limits(1.0, 1.0), 3, "r") == a


def test_out_of_memory_names_what_to_lower() -> None:
    cfg = LoopConfig(steps=1, warmup_steps=0, global_batch=8, micro_batch=4, lr=1e-3, lr_warmup_steps=1,
                     dtype="float32", parallel="ddp", activation_checkpointing=False)
    err = out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"), cfg, 2048)
    assert err is not None and "--micro-batch 4" in str(err) and "--activation-checkpointing" in str(err)
    assert out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory"), cfg, 64) is not None
    assert out_of_memory(RuntimeError("shape mismatch"), cfg, 64) is None
