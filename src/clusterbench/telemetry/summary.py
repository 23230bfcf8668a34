"""One device's samples over one stage, summarised as run.json keeps them."""

from __future__ import annotations

import statistics
from collections import Counter

from clusterbench.telemetry.records import FIGURES, DeviceStage, Sample, Spread


def spread(values: list[float | None]) -> Spread | None:
    """Min, median and max of the known values; None when none is known."""
    known = [v for v in values if v is not None]
    return Spread(min(known), statistics.median(known), max(known)) if known else None


def device_stage(kind: str, samples: list[Sample]) -> DeviceStage:
    """The summary of `samples`, all of one device and one stage."""
    first = samples[0]
    xids = [s.xid for s in samples if s.xid is not None]
    known = [s.throttle for s in samples if s.throttle is not None]
    active = Counter(reason for text in known for reason in text.split("+") if reason != "none")
    return DeviceStage(
        stage=first.stage, host=first.host, device=first.device, kind=kind, rank=first.rank, samples=len(samples),
        **{name: spread([getattr(s, name) for s in samples]) for name in FIGURES},
        xid_events=sum(xids) if xids else None,
        throttle={reason: n / len(known) for reason, n in sorted(active.items())} if known else None,
    )
