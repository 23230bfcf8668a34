"""The fleet stage, also `clusterbench fleet` (docs/methodology.md §16): every node a row, the bad
ones named and proven, the exclude list out. In `run` across several nodes it runs quick, so that
`run` never passes a cluster that `fleet` would cut; on one node it has nothing to compare."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterbench import argtypes
from clusterbench.analyse.baseline import bands_of
from clusterbench.analyse.metrics import Metrics
from clusterbench.analyse.rules import Rule
from clusterbench.errors import UsageError
from clusterbench.inputs import topology
from clusterbench.inputs.topology import Topology
from clusterbench.nodechecks import node_rules
from clusterbench.report.blocks import Part
from clusterbench.results.run import Run
from clusterbench.shape import JobShape
from clusterbench.stages.burnin import metrics as burnin_analysis
from clusterbench.stages.burnin import plan as burnin_plan
from clusterbench.stages.burnin import stage as burnin_stage
from clusterbench.stages.burnin.plan import BurninPlan
from clusterbench.stages.burnin.records import BURNIN
from clusterbench.stages.fleet import actions, conclusion, coverage
from clusterbench.stages.fleet.options import ONE_NODE, FleetOptions
from clusterbench.stages.fleet.records import FLEET, Band
from clusterbench.stages.stage import Context, NotRun, Stage
from clusterbench.stages.train.stage import MODEL_IMPORTS
from clusterbench.telemetry.records import TELEMETRY

if TYPE_CHECKING:
    from clusterbench.runtime.rank import Rank


@dataclass(frozen=True)
class FleetJob:
    options: FleetOptions  # what the ranks do and the conclusion acts on
    bands: list[Band] = field(default_factory=list)  # from --baseline; empty: learned from this fleet
    topology: Topology | None = None  # from --topology, read before any rank starts
    counter_rules: list[Rule] = field(default_factory=list)  # from --node-rules, or the shipped node rules
    burnin: BurninPlan | None = None  # from --burnin: the soak after the node-local phase


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair-bytes", type=argtypes.size, help="bytes each way per pair (default 4M CPU, 256M GPU)")
    p.add_argument("--pair-iters", type=argtypes.whole(1, 1000),
                   help="messages timed per pair and way (default 5; a retest times 10 at least)")
    p.add_argument("--pair-bar", type=argtypes.real(0.0, maximum=1.0),
                   help="a pair is slow below this x the median pair (default 0.5)")
    p.add_argument("--tolerance", type=argtypes.real(0.0, strict=False, maximum=1.0),
                   help="a node's own figure is out when this far below its class's median, and 4 robust "
                        "spreads (default 0.1)")
    p.add_argument("--peak-seconds", type=argtypes.real(0.0, maximum=60.0),
                   help="seconds per node-local peak (default 0.3)")
    p.add_argument("--numerics-steps", type=argtypes.whole(0, 1000),
                   help="steps of the numerics task each device trains for the vote; 0: no vote (default 8)")
    p.add_argument("--global", dest="whole", action="store_true",
                   help="also an all_reduce across every node (one rank each); where it falls short of the pairs, "
                        "halve the fleet to find the smallest set of nodes that explains it")
    p.add_argument("--pairs", choices=("all", "sampled"),
                   help=f"which pairs of nodes the rounds measure: every pair, or each node against --partners "
                        f"others drawn at random (default: every pair up to {coverage.ALL_UP_TO} nodes, sampled "
                        "beyond)")
    p.add_argument("--partners", type=argtypes.whole(2), metavar="K",
                   help=f"sampled pairs: distinct partners per node, in K rounds (default {coverage.PARTNERS}; "
                        "alone, it asks for sampled pairs at any fleet size)")
    p.add_argument("--seed", type=argtypes.whole(0), help="sampled pairs: the seed that draws them (default: drawn, "
                                                          "and recorded in run.json)")
    p.add_argument("--topology", type=Path, metavar="FILE",
                   help="which leaf switch each node hangs from: Slurm's topology.conf, or one `NODE SWITCH` a line; "
                        "pairs are drawn inside and across racks, and a fault a rack's nodes share names its switch")
    p.add_argument("--baseline", type=Path, metavar="RUN",
                   help="judge the nodes by the bands of an earlier fleet run (its folder or run.json), or of a "
                        "baseline from the store (baseline --from-store), of this hardware class, not by this "
                        "fleet's own")
    node_rules.add_argument(p)
    p.add_argument("--burnin", type=burnin_plan.duration, metavar="DURATION",
                   help="after the node-local phase, every device of every node under sustained load for DURATION "
                        "(90, 10m, 2h: clusterbench burnin's soak); what only time shows excludes its node")
    p.add_argument("--exclude-out", type=Path, metavar="FILE", help="write the excluded nodes there, one per line")
    p.add_argument("--drain", action="store_true", help="under Slurm: drain the excluded nodes with scontrol")
    p.add_argument("--dry-run", action="store_true", help="with --drain: print the scontrol commands, run none")


def run_defaults(shape: JobShape, quick: bool) -> dict[str, Any]:
    """In `run`: no fleet on one node, and a short one with --quick (no numerics vote: the canary
    and the train stage check the numerics there)."""
    return {"one_node_ok": True, **({"numerics_steps": 0, "pair_iters": 3} if quick else {})}


def resolve(opts: FleetOptions, context: Context) -> FleetJob:
    if opts.dry_run and not opts.drain:
        raise UsageError("--dry-run prints the --drain commands: add --drain")
    if opts.drain:
        actions.check_drain(opts.dry_run)
    if opts.pairs == "all" and opts.partners is not None:
        raise UsageError("--partners sets how many partners sampled pairs give each node: drop it, or use "
                         "--pairs sampled")
    bands = _baseline(opts.baseline, context) if opts.baseline else []
    found = topology.read(opts.topology) if opts.topology is not None else None
    if context.shape.local_ranks == context.shape.world_size:  # every rank spawned here: one node
        if opts.one_node_ok:
            raise NotRun()
        raise UsageError(ONE_NODE)
    soak = None
    if opts.burnin is not None:
        soak = burnin_plan.plan_of(burnin_plan.BurninOptions(duration=opts.burnin), None, context.shape.local_ranks)
    return FleetJob(opts, bands, found, node_rules.load(opts.node_rules), soak)


def _baseline(path: Path, context: Context) -> list[Band]:
    """The bands of an earlier fleet run or a baseline from the store, refused unless they are of this
    node's hardware class."""
    found = bands_of(path, "--baseline", context.load_run)
    mine = this_class(context.shape)
    theirs = sorted({b.klass for b in found})
    if mine not in theirs:
        raise UsageError(f"--baseline {path}: its bands are of {', '.join(theirs)}, and this node is {mine}: "
                         "a baseline of another hardware class cannot judge it")
    return [b for b in found if b.klass == mine]


def this_class(shape: JobShape) -> str:
    """This host's hardware class, as its node probe will name it."""
    import torch  # only where a baseline is checked

    from clusterbench.hw.host import cpu

    info = cpu()
    if shape.device_type == "cuda" and torch.cuda.is_available():
        return conclusion.node_class(torch.cuda.get_device_name(0), torch.cuda.device_count(), info.logical_cores)
    return conclusion.node_class(info.model or "?", 0, info.logical_cores)


def work(rank: Rank, job: FleetJob) -> None:
    from clusterbench.stages.fleet.qualify import qualify  # torch: only on the ranks

    qualify(rank, job.options, job.topology, job.burnin)


def report(run: Run, metrics: Metrics) -> list[Part]:
    from clusterbench.stages.fleet.report import fleet_section  # only where a report is rendered

    if FLEET.of(run) is None or not FLEET.of(run).nodes:
        return []
    return [Part("nodes", "Nodes", fleet_section(FLEET.of(run))), *burnin_stage.report(run, metrics)]


def conclude(run: Run, job: FleetJob) -> None:
    if FLEET.of(run) is None:
        return
    from clusterbench.stages.fleet.report import SHOWN_ALL  # the report folds the passing rows past as many

    soaked = burnin_analysis.section(run)
    if soaked is not None:
        soaked = burnin_analysis.conclude(soaked, TELEMETRY.of(run), run.status != "complete", job.counter_rules)
        BURNIN.set(run, soaked)
    fleet = conclusion.conclude(run, FLEET.of(run), job.bands, job.counter_rules,
                                soaked.findings if soaked is not None else [])
    print(f"\n== fleet: {len(fleet.nodes)} nodes", flush=True)
    if fleet.coverage is not None:
        print(f"  pairs: {fleet.coverage.summary()}")
    # Every node a line in a small fleet; in a large one the named nodes, and the passing ones counted.
    shown = fleet.nodes if len(fleet.nodes) <= SHOWN_ALL else [r for r in fleet.nodes if r.verdict != "PASS"]
    for row in shown:
        print(f"  {row.verdict:<8} {row.node:<20} {'; '.join(row.reasons)}")
    if len(shown) < len(fleet.nodes):
        print(f"  PASS     {len(fleet.nodes) - len(shown)} other nodes (every node's row: run.json, the report)")
    for f in fleet.job_findings:
        action = f" ({f.action})" if f.action and f.action not in f.what else ""
        print(f"  {f.severity.upper()} of the job, no one node: {f.subject}: {f.what}{action}")
    for text in fleet.bad_switches:
        print(f"  bad switch (its nodes share a fault): {text}")
    for text in fleet.flaky:
        print(f"  flaky link (reported, nobody excluded): {text}")
    for text in fleet.bad_links:
        print(f"  bad link (to look at; nobody excluded for it): {text}")
    for odd in fleet.odd_facts:
        print(f"  odd {odd.fact}: {', '.join(f'{n} {v}' for n, v in zip(odd.nodes, odd.values))} "
              f"(majority: {odd.majority})")
    if fleet.note:
        print(f"  note: {fleet.note}")
    options = job.options
    if not fleet.excluded:
        print(f"  no node to exclude of {len(fleet.nodes)}", flush=True)
    else:
        print(f"  --exclude={fleet.exclude}", flush=True)
    if options.exclude_out is not None:
        print(f"  exclude list: {actions.write_exclude_list(options.exclude_out, fleet.excluded)}", flush=True)
    if options.drain:
        for line in actions.drain(fleet.excluded, options.dry_run):
            print(f"  {line}", flush=True)


FLEET_STAGE = Stage(
    name="fleet", options=FleetOptions, resolve=resolve, work=work, sections=(FLEET,),
    add_arguments=add_arguments, metrics=conclusion.metrics, report=report, conclude=conclude,
    run_defaults=run_defaults, command="qualify a fleet: every node a row, the bad ones proven, an exclude list",
    checks=("fleet", "fleet job-wide", "fleet job-wide warnings"), writes_report=True, imports=("clusterbench.stages.fleet.qualify", *MODEL_IMPORTS),
)
