"""The fleet stage's options: its command's own, and what its ranks and its conclusion work from
(docs/methodology.md §16). Torch-free: the stage's module reads them at import."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ONE_NODE = ("fleet: the job runs on one node; qualify a fleet across 3 nodes or more (torchrun --nnodes, "
            "srun -N, mpirun across hosts)")


@dataclass(frozen=True)
class FleetOptions:
    pair_bytes: int | None = None  # None: PAIR_BYTES for the device
    pair_iters: int = 5
    pair_bar: float = 0.5
    tolerance: float = 0.1
    peak_seconds: float = 0.3
    numerics_steps: int = 8  # 0: no numerics vote
    baseline: Path | None = None
    exclude_out: Path | None = None
    drain: bool = False
    dry_run: bool = False
    one_node_ok: bool = False  # `run`: a job on one node has no fleet to judge, and says so
    whole: bool = False  # --global: the all_reduce across every node, and the search where it falls short
    pairs: str = "auto"  # which pairs the rounds measure: "all", "sampled", or "auto" (all up to ALL_UP_TO nodes)
    partners: int | None = None  # sampled: distinct partners per node; None: coverage.PARTNERS
    seed: int | None = None  # sampled: what draws the pairings; None: drawn by rank 0, recorded
    topology: Path | None = None  # node -> leaf switch: Slurm's topology.conf, or `NODE SWITCH` lines
    node_rules: Path | None = None  # how the counters are judged; None: the shipped node rules
    burnin: float | None = None  # seconds every device soaks after the node-local phase; None: no burn-in
