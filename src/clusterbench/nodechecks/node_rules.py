"""A node's error counters and events judged by the node rules (node_rules.yaml, or a team's --node-rules
file): each miss one line that says what was found and what to do about it (docs/methodology.md §20).

A miss names each finding behind it with the finding's own action (each Xid its own: reset the GPU, drain and
RMA, reseat it), and the rule's action after them where it says something else (a team's "call the network
team"). A rules file may judge only the counts the node checks give (nodechecks/table.py): a rule of another metric is
a typo that would pass every node, and is refused.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from clusterbench.analyse.metrics import Metrics
from clusterbench.analyse.rules import LEVELS, Rule, evaluate, load_rules, matches
from clusterbench.argtypes import clipped
from clusterbench.errors import UsageError
from clusterbench.nodechecks.table import NODE_RULES_HELP, counted
from clusterbench.results.findings import Finding, Severity

# How a miss weighs where findings carry a severity: a FAIL is critical (it excludes a fleet's node), a WARN a
# warning (a suspect).
SEVERITY: dict[str, Severity] = {"FAIL": "critical", "WARN": "warning"}


@dataclass(frozen=True)
class Miss:
    level: str  # WARN or FAIL
    rule: str  # the rule's name
    metric: str  # the count it judged
    found: str  # what was found: each finding behind the miss with its action, or the count and the criteria
    action: str  # what to do: the findings' actions, and the rule's where it says something else

    @property
    def line(self) -> str:
        return f"{self.rule}: {self.found}"

    def finding(self, node: str) -> Finding:
        """The miss as a finding of `node`, of the miss's weight: what a burn-in keeps and a fleet excludes for."""
        return Finding(node, self.line, SEVERITY[self.level], self.action, self.metric, node)


def default_path() -> Path:
    return Path(str(files("clusterbench.nodechecks") / "node_rules.yaml"))


def add_argument(p: argparse.ArgumentParser) -> None:
    """--node-rules, as `check` takes it (`fleet` and `burnin` declare it in their options)."""
    p.add_argument("--node-rules", type=Path, metavar="FILE", help=f"{NODE_RULES_HELP} (default the shipped "
                                                                   "node_rules.yaml)")


def load(path: Path | None = None) -> list[Rule]:
    """The node rules: a team's file, or the shipped one; a broken file, or a rule of no count the node checks give,
    is a UsageError naming where."""
    where = path or default_path()
    found = load_rules(where)
    known = counted()
    for rule in found:
        if not any(matches(p, name) for p in rule.patterns for name in known):
            raise UsageError(f"node rules {where}: rule {clipped(repr(rule.name))} judges "
                             f"{clipped(', '.join(rule.patterns))}, which no node check counts (they count "
                             f"{', '.join(known)})")
    return found


def of(rules: list[Rule], counts: tuple[str, ...]) -> list[Rule]:
    """The rules that judge any of `counts`: what judges one check's counts, the others' left to their checks."""
    return [r for r in rules if any(matches(p, name) for p in r.patterns for name in counts)]


def judge(counts: dict[str, float], findings: list[Finding], rules: list[Rule]) -> list[Miss]:
    """Each rule the counts miss, the FAILs first. A count the node does not have (no GPU, no InfiniBand) is not
    judged, unless its rule's `missing` says FAIL or WARN: its default, error, is for a typo, which load() refuses."""
    metrics = Metrics()
    for name, value in counts.items():
        metrics.put(name, value)
    by_name = {r.name: r for r in rules}
    misses = []
    for result in evaluate(rules, metrics, strict=False):
        if result.verdict not in LEVELS:
            continue
        rule = by_name[result.rule]
        if result.value is None and rule.missing == "error":
            continue
        behind = [f for f in findings if f.metric == result.metric]
        found = "; ".join(f"{f.subject}: {f.what}" + (f" ({f.action})" if f.action else "") for f in behind)
        if not found:
            found = (result.detail if result.value is None else
                     f"{result.metric} = {result.value:g}, the rule asks {result.criteria.strip()}")
        actions = list(dict.fromkeys(f.action for f in behind if f.action))
        if rule.action and rule.action not in actions:
            found += f" ({rule.action})"
            actions.append(rule.action)
        misses.append(Miss(result.verdict, rule.name, result.metric, found, "; ".join(actions)))
    return sorted(misses, key=lambda m: m.level != "FAIL")
