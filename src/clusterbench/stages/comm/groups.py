"""Each team's process group, and NCCL_ALGO set while a forced algorithm's communicator forms."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import torch.distributed as dist

from clusterbench.stages.comm.scopes import WHOLE_JOB, Phase, Team


def with_groups(phases: list[Phase]) -> list[Phase]:
    """Make each team's process group. Every rank calls this with the same phases, in the same
    order, because creating a group is a collective over the whole job."""
    return [replace(phase, teams=tuple(team if team.name == WHOLE_JOB else
                                       replace(team, group=_new_group(team))
                                       for team in phase.teams))
            for phase in phases]


def _new_group(team: Team) -> Any:
    with nccl_algo(team.nccl_algo):  # a communicator set up now (eagerly) sees its algorithm
        return dist.new_group(list(team.ranks))


@contextmanager
def nccl_algo(algo: str | None) -> Iterator[None]:
    """NCCL_ALGO set to `algo` for a while (nothing when None), then as it was."""
    if algo is None:
        yield
        return
    before = os.environ.get("NCCL_ALGO")
    os.environ["NCCL_ALGO"] = algo
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("NCCL_ALGO", None)
        else:
            os.environ["NCCL_ALGO"] = before
