"""The fleet stage's options, each declared once: its command's own, and what its ranks and its conclusion work
from (docs/methodology.md §16). Torch-free: the stage's module reads them at import."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clusterbench import argtypes
from clusterbench.argtypes import option
from clusterbench.nodechecks.table import NODE_RULES_HELP
from clusterbench.stages.burnin.options import duration

ONE_NODE = ("fleet: the job runs on one node; qualify a fleet across 3 nodes or more (torchrun --nnodes, "
            "srun -N, mpirun across hosts)")
# Every pair up to this many nodes (2,016 pairs in 63 rounds, minutes at 400 Gbps); beyond, each node against
# PARTNERS others (docs/methodology.md §16.3; BENCHMARKS.md, the number of partners).
ALL_UP_TO = 128
PARTNERS = 8


@dataclass(frozen=True)
class FleetOptions:
    pair_bytes: int | None = option(None, "--pair-bytes", type=argtypes.size, help="bytes each way per pair",
                                    shown="4M CPU, 256M GPU")
    pair_iters: int = option(5, "--pair-iters", type=argtypes.whole(1, 1000),
                             help="messages timed per pair and way (a retest times 10 at least)")
    pair_bar: float = option(0.5, "--pair-bar", type=argtypes.real(0.0, maximum=1.0),
                             help="a pair is slow below this x the median pair")
    tolerance: float = option(0.1, "--tolerance", type=argtypes.real(0.0, strict=False, maximum=1.0),
                              help="a node's own figure is out when this far below its class's median, and 4 robust "
                                   "spreads")
    peak_seconds: float = option(0.3, "--peak-seconds", type=argtypes.real(0.0, maximum=60.0),
                                 help="seconds per node-local peak")
    numerics_steps: int = option(8, "--numerics-steps", type=argtypes.whole(0, 1000),
                                 help="steps of the numerics task each device trains for the vote; 0: no vote")
    whole: bool = option(False, "--global", action="store_true",
                         help="also an all_reduce across every node (one rank each); where it falls short of the "
                              "pairs, halve the fleet to find the smallest set of nodes that explains it")
    pairs: str = option("auto", "--pairs", choices=("all", "sampled"),
                        help="which pairs of nodes the rounds measure: every pair, or each node against --partners "
                             "others drawn at random",
                        shown=f"every pair up to {ALL_UP_TO} nodes, sampled beyond")
    partners: int | None = option(None, "--partners", type=argtypes.whole(2), metavar="K",
                                  help="sampled pairs: distinct partners per node, in K rounds (alone, it asks for "
                                       "sampled pairs at any fleet size)", shown=str(PARTNERS))
    seed: int | None = option(None, "--seed", type=argtypes.whole(0), help="sampled pairs: the seed that draws them",
                              shown="drawn, and recorded in run.json")
    topology: Path | None = option(None, "--topology", type=Path, metavar="FILE",
                                   help="which leaf switch each node hangs from: Slurm's topology.conf, or one `NODE "
                                        "SWITCH` a line; pairs are drawn inside and across racks, and a fault a "
                                        "rack's nodes share names its switch")
    baseline: Path | None = option(None, "--baseline", type=Path, metavar="RUN",
                                   help="judge the nodes by the bands of an earlier fleet run (its folder or "
                                        "run.json), or of a baseline from the store (baseline --from-store), of this "
                                        "hardware class, not by this fleet's own")
    node_rules: Path | None = option(None, "--node-rules", type=Path, metavar="FILE", help=NODE_RULES_HELP,
                                     shown="the shipped node_rules.yaml")
    burnin: float | None = option(None, "--burnin", type=duration, metavar="DURATION",
                                  help="after the node-local phase, every device of every node under sustained load "
                                       "for DURATION (90, 10m, 2h: clusterbench burnin's soak); what only time shows "
                                       "excludes its node")
    exclude_out: Path | None = option(None, "--exclude-out", type=Path, metavar="FILE",
                                      help="write the excluded nodes there, one per line")
    drain: bool = option(False, "--drain", action="store_true",
                         help="under Slurm: drain the excluded nodes with scontrol")
    dry_run: bool = option(False, "--dry-run", action="store_true",
                           help="with --drain: print the scontrol commands, run none")
    one_node_ok: bool = False  # `run`: a job on one node has no fleet to judge, and says so
