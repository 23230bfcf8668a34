"""A fleet's conclusion from what its ranks measured (docs/methodology.md §16): every node a row
with its figures, the fleet's bands and its verdict; the nodes to take out, each with its reasons.

A node is excluded only on proof: a link slow again against two healthy partners, a figure of its
own that fell out of its class's band twice (the second time measured alone), numerics that left
the majority bit for bit, a counter a node rule fails (uncorrectable ECC errors, pending remaps, a
recent critical Xid), a critical finding of a --burnin soak, or a node that stopped answering. What is odd but not proven (a fact
the fleet disagrees with, a suspect the retests did not confirm) makes it a suspect.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from clusterbench.analyse.metrics import Metrics
from clusterbench.analyse.rules import Rule
from clusterbench.inputs import hostlist
from clusterbench.nodechecks import bands, node_rules
from clusterbench.results.documents import Band
from clusterbench.results.findings import Finding
from clusterbench.results.run import Run
from clusterbench.stages.comm.records import PAIRS, PairRow
from clusterbench.stages.fleet import agreement, racks, retests
from clusterbench.stages.fleet.records import FLEET, Exclusion, Fleet, NodeRow


def nodes_of(run: Run) -> list[str]:
    """The job's nodes, in the order of their first rank."""
    return list(dict.fromkeys(p.node for p in sorted(run.env.ranks, key=lambda p: p.rank)))


def link_figures(rows: list[PairRow]) -> dict[str, dict[str, float]]:
    """Each node's medians over the pairs it sends and receives in, and its median latency: one pass over
    the rows, not one per node."""
    found: dict[str, dict[str, list[float]]] = defaultdict(lambda: {"send_gbps": [], "recv_gbps": [],
                                                                    "latency_us": []})
    for r in rows:
        found[r.src_node]["send_gbps"].append(r.gbps)
        found[r.dst_node]["recv_gbps"].append(r.gbps)
        for node in {r.src_node, r.dst_node}:
            found[node]["latency_us"].append(r.latency_us)
    return {node: {name: statistics.median(values) for name, values in figures.items() if values}
            for node, figures in found.items()}


def conclude(run: Run, fleet: Fleet, baseline: list[Band] | None = None,
             counter_rules: list[Rule] | None = None, soak: list[Finding] | None = None) -> Fleet:
    """`fleet` with its conclusion filled in, from the run's pairs and lost ranks, each node's counters judged by
    `counter_rules` (None: the shipped node rules), and what a --burnin soak found (`soak`, concluded with the same
    rules: a critical finding excludes its node, a warning makes it a suspect; one of no node the fleet has, the
    job's all_reduce drifting, is the fleet's own, in job_findings)."""
    nodes = nodes_of(run)
    probes = {p.node: (p.klass, p.metrics) for p in fleet.probes}
    fleet.bands = baseline if baseline else bands.learn_all(probes, fleet.tolerance)
    band_of = {(b.klass, b.metric): b for b in fleet.bands}
    reasons: dict[str, list[str]] = {n: [] for n in nodes}  # proof: the node is excluded
    doubts: dict[str, list[str]] = {n: [] for n in nodes}  # not proven either way: a suspect
    cleared: dict[str, list[str]] = {n: [] for n in nodes}  # out once, within on the second look: said, not held

    links = retests.judge(PAIRS.of(run), fleet.retests, nodes, fleet.pair_bar)
    for node, why in links.condemned.items():
        reasons[node] += why
    for node, why in links.suspects.items():
        doubts[node].append(why)
    fleet.flaky, fleet.bad_links = links.flaky, links.bad_links
    fleet.bad_switches = []
    for switch, (text, slow) in racks.shared(PAIRS.of(run), fleet.racks, links).items():
        fleet.bad_switches.append(text)
        for node in slow:
            (reasons if node in links.condemned else doubts)[node].insert(0, f"behind {switch}, a fault its nodes "
                                                                              "share (see the switch)")

    for node, out in bands.outliers(probes, fleet.bands, fleet.tolerance).items():
        klass = probes[node][0]
        for metric in out:
            band = band_of[(klass, metric)]
            first = bands.reason(metric, probes[node][1][metric], band)
            again = fleet.rechecks.get(node, {}).get(metric)
            if again is None:
                doubts[node].append(f"{first}; not measured again")
            elif bands.out_of(band, again, fleet.tolerance):
                reasons[node].append(f"{first}; {again:.3g} measured again alone")
            else:
                cleared[node].append(f"{first} once, {again:.3g} measured again alone: within the band")

    rules = counter_rules if counter_rules is not None else node_rules.load()
    for p in fleet.probes:
        for miss in node_rules.judge(p.counts, p.findings, rules):
            (reasons if miss.level == "FAIL" else doubts)[p.node].append(miss.line)

    fleet.job_findings = []
    for f in soak or []:
        if f.severity == "info":
            continue
        if f.node not in reasons:  # the job's own (its all_reduce), or a node it does not name: judged as the fleet's
            fleet.job_findings.append(f)
            continue
        action = f" ({f.action})" if f.action and f.action not in f.what else ""
        (reasons if f.severity == "critical" else doubts)[f.node].append(f"burn-in: {f.what}{action}")

    fleet.odd_facts = agreement.odd_facts(fleet.probes)
    for odd in fleet.odd_facts:
        for node, value in zip(odd.nodes, odd.values):
            doubts.setdefault(node, []).append(f"{odd.fact} {value} where {odd.majority_nodes} nodes have "
                                               f"{odd.majority}")

    fleet.divergences, unsettled = agreement.divergences(fleet.numerics, {p.node: p.klass for p in fleet.probes})
    for d in fleet.divergences:
        reasons[d.node].append(f"numerics: {d.device} (rank {d.rank}) leaves the majority ({d.majority} of {d.voters} "
                               f"devices) at step {d.step} of the numerics task: {d.loss!r} against "
                               f"{d.majority_loss!r}")
    for node, why in unsettled.items():
        doubts[node].append(why)
    if fleet.whole is not None and fleet.isolated:
        median = statistics.median(r.gbps for r in PAIRS.of(run)) if PAIRS.of(run) else 0.0
        text = (f"the all_reduce across all {len(fleet.whole.nodes)} nodes runs at {fleet.whole.busbw_gbps:.3g} Gbps "
                f"busbw, {fleet.whole.busbw_gbps / median if median else 0:.2f}x the median pair, and the search "
                f"narrowed it to {', '.join(fleet.isolated)}")
        if len(fleet.isolated) == 1:  # beside a node of the fast half, slower than its last partner beside it
            reasons[fleet.isolated[0]].append(f"{text}: slow beside a healthy node where another node is not")
        else:
            for node in fleet.isolated:
                doubts[node].append(f"{text}: no smaller set found")
    elif fleet.whole is not None and fleet.search:
        short = "the all_reduce across nodes falls short of the pairs, and no part of the fleet alone explains it"
        fleet.note = "; ".join(filter(None, [fleet.note, short]))
    for lost in run.lost:
        reasons.setdefault(lost.node, []).append(f"did not finish {lost.during or 'its work'}: rank {lost.rank} "
                                                 "went silent (died, hung or cut off)")

    per_node = link_figures(PAIRS.of(run))
    fleet.nodes = []
    for node in nodes:
        klass, figures = probes.get(node, ("?", {}))
        verdict = "EXCLUDE" if reasons.get(node) else "SUSPECT" if doubts.get(node) else "PASS"
        fleet.nodes.append(NodeRow(node, klass, {**figures, **per_node.get(node, {})}, verdict,
                                   reasons.get(node, []) + doubts.get(node, []) + cleared.get(node, [])))
    fleet.excluded = [Exclusion(r.node, reasons[r.node]) for r in fleet.nodes if r.verdict == "EXCLUDE"]
    fleet.exclude = hostlist.compress([e.node for e in fleet.excluded])
    return fleet


def metrics(run: Run, m: Metrics) -> None:
    """fleet.excluded, fleet.suspects, fleet.flaky_links, fleet.odd_facts, fleet.job_critical, fleet.job_warnings:
    counts, with the names as notes."""
    fleet = FLEET.of(run)
    if fleet is None or not fleet.nodes:
        return
    suspects = [r.node for r in fleet.nodes if r.verdict == "SUSPECT"]
    m.put("fleet.excluded", len(fleet.excluded),
          f"exclude {fleet.exclude}" if fleet.excluded else f"none of {len(fleet.nodes)} nodes")
    m.put("fleet.suspects", len(suspects), ", ".join(suspects) or "none")
    m.put("fleet.flaky_links", len(fleet.flaky), "; ".join(fleet.flaky) or "none")
    m.put("fleet.odd_facts", len(fleet.odd_facts),
          "; ".join(f"{o.fact}: {', '.join(o.nodes)}" for o in fleet.odd_facts) or "none")
    for name, severity in (("job_critical", "critical"), ("job_warnings", "warning")):
        found = [f for f in fleet.job_findings if f.severity == severity]
        m.put(f"fleet.{name}", len(found), "; ".join(f"{f.subject}: {f.what}" for f in found) or "none")
