"""run.json's `canary` section: the numerics canary's task as it trained on this hardware (its record is a
fine-tuning task's, stages/train/records.py)."""

from __future__ import annotations

from clusterbench.results.run import Section
from clusterbench.stages.train.records import Train

CANARY = Section("canary", Train | None)
