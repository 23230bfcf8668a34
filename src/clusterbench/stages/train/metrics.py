"""The fine-tuning task's metrics: train.* for the train stage, canary.* for the numerics canary."""

from __future__ import annotations

from clusterbench.analyse.metrics import Metrics
from clusterbench.results.run import Run
from clusterbench.stages.canary.records import CANARY
from clusterbench.stages.train import stragglers
from clusterbench.stages.train.records import TRAIN, Train, TrainSummary

_TRAIN_FIGURES = ("tgs", "padded_tgs", "tflops_per_device", "mfu", "hfu", "peak_memory_bytes")
_ALIGNMENT_FIGURES = ("mre", "variance", "max_abs_dev", "first_step_error")


def metrics(run: Run, m: Metrics) -> None:
    """train.*: whether it completed, its speed, and its alignment."""
    if TRAIN.of(run) is None:
        return
    _task(TRAIN.of(run), m, "train")
    if TRAIN.of(run).summary is not None:
        _speed(TRAIN.of(run).summary, m)
    _straggler(TRAIN.of(run), m)


def canary_metrics(run: Run, m: Metrics) -> None:
    """canary.*: whether the numerics canary completed and aligned."""
    if CANARY.of(run) is not None:
        _task(CANARY.of(run), m, "canary")


def _task(train: Train, m: Metrics, family: str) -> None:
    """<family>.completed and <family>.alignment.*."""
    s = train.summary
    steps = len(train.losses)
    if s is None:
        m.put(f"{family}.completed", 0, f"the run stopped after {steps} steps")
    else:
        speed = f"{steps} steps, tgs {s.tgs or 0:,.0f} tokens/device/s"
        if s.tflops_per_device is not None:
            speed += f", {s.tflops_per_device:.4g} TFLOPS/device"
        m.put(f"{family}.completed", s.status == "complete", speed if s.status == "complete" else s.stop_reason)
    a = train.alignment
    if a is None:
        m.absent[f"{family}.alignment.pass"] = train.reference_note or "no reference curve matches this task"
        return
    for key in _ALIGNMENT_FIGURES:
        value = getattr(a, key)
        if value is not None:
            m.put(f"{family}.alignment.{key}", value)
    figures = (f"MRE {a.mre:.4f} (limit {a.mre_limit:g}), variance {a.variance:.3g} (limit {a.variance_limit:.3g})"
               if a.mre is not None and a.variance is not None else "; ".join(a.reasons))
    why = f": {'; '.join(a.reasons)}" if a.reasons and a.mre is not None else ""
    m.put(f"{family}.alignment.pass", a.verdict == "PASS", f"{figures} vs {a.reference}{why}")


def _speed(s: TrainSummary, m: Metrics) -> None:
    for key in _TRAIN_FIGURES:
        value = getattr(s, key)
        if value is not None:
            m.put(f"train.{key}", value)
    if s.mfu is not None:
        m.notes["train.mfu"] = f"{s.mfu:.1%} of {s.peak_source}"
    else:
        m.absent["train.mfu"] = "no FLOPs formula for this model (Llama-style configs only)"


def _straggler(train: Train, m: Metrics) -> None:
    """train.straggler.compute_ratio (the slowest rank's compute over the others' median) and
    train.straggler.wait_share (the others' gradient-sync wait over their step), named in the note."""
    if not train.phases:
        m.absent["train.straggler.compute_ratio"] = "no per-rank phases in this run's train section"
        return
    why = stragglers.judge_reason(train.phases, train.config.parallel)
    if why is not None:
        m.absent["train.straggler.compute_ratio"] = why
        return
    found = stragglers.find(train.phases)
    m.put("train.straggler.compute_ratio", found.ratio, stragglers.finding(found))
    m.put("train.straggler.wait_share", found.others_wait_share)
