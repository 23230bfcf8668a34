"""Synthetic run.json documents (the layout of results.run) for the report and compare tests:
GPU machines this CI has not, and train figures of a size no CPU reaches."""

from __future__ import annotations

import json
import math
from dataclasses import fields
from pathlib import Path
from typing import Any

from clusterbench.results.run import RUN_KIND, SCHEMA_VERSION, Run, from_doc, to_doc, upgraded
from clusterbench.stages.comm.records import CommRow
from clusterbench.stages.registry import sections


def train_section(tgs: float = 5120.0, mre: float = 0.006, verdict: str = "PASS") -> dict[str, Any]:
    reference = [2.2 * math.exp(-step / 40) + 1.1 + 0.02 * math.sin(step) for step in range(1, 101)]
    losses = [r * (1 + 0.004 * math.cos(3 * i)) for i, r in enumerate(reference)]
    return {
        "config": {
            "preset": "1b", "model_params": 1_236_000_000, "model_config": {"hidden_size": 2048},
            "model_hash": "0123456789abcdef", "lr_warmup_steps": 10,
            "parallel": "fsdp", "dtype": "bfloat16", "world_size": 8, "global_batch": 64, "micro_batch": 8,
            "grad_accum": 1, "seq_len": 2048, "packing": True, "steps": 100, "warmup_steps": 10, "lr": 2e-5,
            "seed": 1234, "task": "sft-shipped", "activation_checkpointing": False,
        },
        "summary": {
            "steps_done": 100, "tokens": 11_796_480, "window_s": 288.0, "tgs": tgs, "padded_tgs": None,
            "flops_per_step": 1.02e15, "tflops_per_device": 393.4, "mfu": 0.398, "hfu": None,
            "peak_tflops": 989.0, "peak_source": "datasheet (REFERENCE.md §3)",
            "peak_memory_bytes": 61 * 2**30, "peak_memory_kind": "torch.cuda.max_memory_allocated",
            "status": "complete",
        },
        "losses": losses,
        "alignment": {
            "reference": "sft-shipped-1b-bf16", "reference_losses": reference, "steps_compared": 100,
            "variance": 4.1e-5, "mre": mre, "mre_window": [21, 100], "max_abs_dev": 0.0132,
            "first_step_error": 0.0031, "variance_limit": 2.5e-4, "mre_limit": 0.02, "verdict": verdict,
            "reasons": [] if verdict == "PASS" else [f"mean relative error {mre:.3g} >= limit 0.02"],
        },
    }


def peaks_section(devices: int = 8) -> dict[str, Any]:
    matmul = [{"device": f"cuda:{i}", "dtype": dtype, "n": 8192, "tflops": tflops - i, "iters": 100, "seconds": 1.1}
              for i in range(devices) for dtype, tflops in (("bfloat16", 791.0), ("float32", 51.0))]
    copy = [{"device": f"cuda:{i}", "nbytes": 1 << 30, "gbps": 3900.0 - 10 * i, "iters": 500, "seconds": 0.55}
            for i in range(devices)]
    return {"matmul": matmul, "copy": copy}


VERDICTS = [
    {"check": "hardware", "status": "PASS", "detail": "8 GPUs, NVLink 4 x18 each, no downtrained PCIe link"},
    {"check": "comm busbw", "status": "WARN", "detail": "all_gather reaches 82 % of the NVLink line at 1 GiB"},
    {"check": "comm correctness", "status": "PASS", "detail": "every checked element as expected"},
    {"check": "loss alignment", "status": "PASS", "detail": "MRE 0.006 < 0.02 over steps 21..100"},
    {"check": "MFU", "status": "FAIL", "detail": "MFU 39.8 % is below the 40 % expected for this preset"},
]


def comm_rows(ops_peak_gbs: dict[str, float], world_size: int = 8) -> list[dict[str, Any]]:
    """An nccl-tests-like sweep 1 KiB..1 GiB whose busbw saturates at the given GB/s per op."""
    rows = []
    for op, peak in ops_peak_gbs.items():
        for k in range(10, 31, 2):
            size = 1 << k
            busbw = peak * size / (size + 8 * 2**20)
            seconds = size / (busbw * 1e9) * (7 / 8 if op == "all_gather" else 4 / 7)
            rows.append({
                "op": op, "size_bytes": size, "count": size // 2, "dtype": "bfloat16", "world_size": world_size,
                "in_place": False, "duration_us": seconds * 1e6, "throughput_gbps": size / seconds * 8 / 1e9,
                "busbw_gbps": busbw * 8, "wrong": 0, "iters": 50, "p50_us": seconds * 1e6,
                "p99_us": seconds * 1.1e6, "min_us": seconds * 0.95e6, "max_us": seconds * 1.2e6, "cv": 0.03,
                "reduce_op": "sum" if op != "all_gather" else None, "root": None,
                "scope": "global", "team": "all", "nodes": 1, "timing": "loop", "algo": "native",
            })
    assert set(rows[0]) == {f.name for f in fields(CommRow)}
    return rows


def scope_rows(scope: str, teams_peak_gbs: dict[str, float], op: str = "all_reduce") -> list[dict[str, Any]]:
    """The sweep of comm_rows for each team of a scope (intra: a node, inter: a rail) at its own peak."""
    return [row | {"scope": scope, "team": team} for team, peak in teams_peak_gbs.items()
            for row in comm_rows({op: peak})]


def gpu_run_doc(hardware: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """A complete `clusterbench run` on 8 H200s: all_reduce above the line (NVLS), all_gather below."""
    doc = {
        "schema_version": SCHEMA_VERSION, "kind": RUN_KIND, "tool": "clusterbench", "version": "0.1.0",
        "command": "run",
        "argv": ["clusterbench", "run"], "started_utc": "20260101T000000Z", "finished_utc": "20260101T000900Z",
        "status": "complete", "error": None,
        "env": {"hostname": "gpu-node-01", "device_type": "cuda", "backend": "nccl", "world_size": 8,
                "hosts": ["gpu-node-01"] * 8},
        "comm_options": {"unit": "GBps", "check": True},
        "hardware": hardware or None,
        "comm": comm_rows({"all_reduce": 478.0, "all_gather": 365.0}),
        "train": train_section(),
        "peaks": peaks_section(),
        "verdicts": VERDICTS,
    }
    return doc | overrides


def as_run(doc: dict[str, Any]) -> Run:
    """The document (of its version) as the typed record every reader of run.json gets."""
    return from_doc(upgraded(doc, doc.get("schema_version", SCHEMA_VERSION), sections()), sections())


def doc_of(run: Run) -> dict[str, Any]:
    """The run as run.json holds it."""
    return to_doc(run, sections())


def write_run(folder: Path, doc: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(json.dumps(doc, indent=1))
    return folder
