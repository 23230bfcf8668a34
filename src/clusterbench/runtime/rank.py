"""What a command's per-rank work is handed: its place in the job, a progress channel, rank 0's folder."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from clusterbench.results.folder import RunFolder
from clusterbench.results.run import Env
from clusterbench.runtime.dist import Worker
from clusterbench.runtime.rendezvous import Rendezvous


class StageMarks(Protocol):
    """Whatever keeps per-stage records while the stages run (the telemetry recorder)."""

    def stage(self, name: str) -> AbstractContextManager[None]: ...


class Progress:
    """Where a rank is, left on the rendezvous board, so whoever outlives a dead or stuck rank
    can say what it was doing and what the others were waiting in."""

    def __init__(self, rank: int, board: Rendezvous | None = None) -> None:
        self.rank = rank
        self._board = board

    def at(self, where: str) -> None:
        self._post(lambda board: board.at(self.rank, where))

    def error(self, kind: str, message: str) -> None:
        self._post(lambda board: board.end(self.rank, kind, message))

    def _post(self, write: Callable[[Rendezvous], None]) -> None:
        if self._board is None:
            return
        try:
            write(self._board)
        except (RuntimeError, OSError):
            self._board = None  # the store's host is gone: the job is ending, and progress notes no longer help


@dataclass
class Rank:
    worker: Worker
    progress: Progress
    env: Env  # facts gathered from every rank
    folder: RunFolder | None  # rank 0 only: it records and prints
    telemetry: StageMarks | None = None  # None: telemetry is off

    def say(self, text: str) -> None:
        """Print on rank 0 only, so lines from several ranks never interleave."""
        if self.folder is not None:
            print(text, flush=True)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Mark a stage: telemetry is summarised per stage, and gathered to rank 0 at its end, so
        every rank must mark the same stages in the same order. A stage marked inside another
        one takes its place: the outer one then records nothing of its own."""
        if self.telemetry is None:
            yield
            return
        with self.telemetry.stage(name):
            yield
