"""What a command's per-rank work is handed: its place in the job, a progress channel, rank 0's folder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clusterbench.dist import Worker
from clusterbench.results.folder import RunFolder
from clusterbench.results.schema import Env


class Progress:
    """Where a rank is, so the supervisor can say what a dead or stuck rank was doing."""

    def __init__(self, rank: int, channel: Any = None) -> None:
        self.rank = rank
        self._channel = channel

    def at(self, where: str) -> None:
        if self._channel is not None:
            self._channel.put(("at", self.rank, where))

    def error(self, kind: str, message: str) -> None:
        if self._channel is not None:
            self._channel.put((kind, self.rank, message))


@dataclass
class Rank:
    worker: Worker
    progress: Progress
    env: Env  # facts gathered from every rank
    folder: RunFolder | None  # rank 0 only: it records and prints

    def say(self, text: str) -> None:
        """Print on rank 0 only, so lines from several ranks never interleave."""
        if self.folder is not None:
            print(text, flush=True)
