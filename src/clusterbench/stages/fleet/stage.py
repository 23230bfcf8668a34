"""The fleet stage, also `clusterbench fleet` (docs/methodology.md §16): every node a row, the bad
ones named and proven, the exclude list out. In `run` across several nodes it runs quick, so that
`run` never passes a cluster that `fleet` would cut; on one node it has nothing to compare."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterbench.analyse.baseline import bands_of
from clusterbench.analyse.metrics import Metrics
from clusterbench.analyse.rules import Rule
from clusterbench.errors import UsageError
from clusterbench.inputs import topology
from clusterbench.inputs.topology import Topology
from clusterbench.nodechecks import node_rules
from clusterbench.nodechecks.bands import node_class
from clusterbench.report.blocks import Part
from clusterbench.results.documents import Band
from clusterbench.results.run import Run
from clusterbench.shape import JobShape
from clusterbench.stages.burnin.metrics import judge_soak, section
from clusterbench.stages.burnin.options import BurninOptions
from clusterbench.stages.burnin.plan import BurninPlan, plan_of
from clusterbench.stages.burnin.records import BURNIN
from clusterbench.stages.fleet import actions, conclusion
from clusterbench.stages.fleet.options import ONE_NODE, FleetOptions
from clusterbench.stages.fleet.records import FLEET
from clusterbench.stages.stage import Context, NotRun, Stage
from clusterbench.stages.train.stage import MODEL_IMPORTS
from clusterbench.store.record import NodeResult
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
        soak = plan_of(BurninOptions(duration=opts.burnin), None, context.shape.local_ranks)
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
        return node_class(torch.cuda.get_device_name(0), torch.cuda.device_count(), info.logical_cores)
    return node_class(info.model or "?", 0, info.logical_cores)


def work(rank: Rank, job: FleetJob) -> None:
    from clusterbench.stages.fleet.qualify import qualify  # torch: only on the ranks

    qualify(rank, job.options, job.topology, job.burnin)


def report(run: Run, metrics: Metrics) -> list[Part]:
    from clusterbench.stages.burnin.report import soak_parts  # matplotlib: only where a report is rendered
    from clusterbench.stages.fleet.report import fleet_section

    if FLEET.of(run) is None or not FLEET.of(run).nodes:
        return []
    return [Part("nodes", "Nodes", fleet_section(FLEET.of(run))), *soak_parts(run)]


def conclude(run: Run, job: FleetJob) -> None:
    if FLEET.of(run) is None:
        return
    from clusterbench.stages.fleet.report import SHOWN_ALL  # the report folds the passing rows past as many

    soaked = section(run)
    if soaked is not None:
        soaked = judge_soak(soaked, TELEMETRY.of(run), run.status != "complete", job.counter_rules)
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


def node_results(run: Run) -> list[NodeResult]:
    """Every node's row, as the results store keeps it: history and baselines follow the nodes one by one."""
    fleet = FLEET.of(run)
    return [NodeResult(r.node, r.klass, r.metrics, r.verdict) for r in fleet.nodes] if fleet is not None else []


FLEET_STAGE = Stage(
    name="fleet", options=FleetOptions, resolve=resolve, work=work, sections=(FLEET,), nodes=node_results,
    metrics=conclusion.metrics, report=report, conclude=conclude,
    run_defaults=run_defaults, command="qualify a fleet: every node a row, the bad ones proven, an exclude list",
    checks=("fleet", "fleet job-wide", "fleet job-wide warnings"), writes_report=True,
    imports=("clusterbench.stages.fleet.qualify", *MODEL_IMPORTS),
)
