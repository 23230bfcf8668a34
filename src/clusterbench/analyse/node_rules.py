"""A node's error counters and events judged by the node rules (node_rules.yaml, or a team's --node-rules
file): each miss one line that says what was found and what to do about it (docs/methodology.md §20)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from clusterbench.analyse import rules as rule_engine
from clusterbench.analyse.metrics import Metrics
from clusterbench.results.findings import Finding


@dataclass(frozen=True)
class Miss:
    level: str  # WARN or FAIL
    line: str  # the rule's name, what was found (each finding behind it), and the action


def default_path() -> Path:
    return Path(str(files("clusterbench.analyse") / "node_rules.yaml"))


def load(path: Path | None = None) -> list[rule_engine.Rule]:
    """The node rules: a team's file, or the shipped one; a broken file is a UsageError naming where."""
    return rule_engine.load_rules(path or default_path())


def judge(counts: dict[str, float], findings: list[Finding], rules: list[rule_engine.Rule]) -> list[Miss]:
    """Each rule the counts miss, the FAILs first; counters the node does not have are not judged."""
    metrics = Metrics()
    for name, value in counts.items():
        metrics.put(name, value)
    misses = []
    for result in rule_engine.evaluate(rules, metrics, strict=False):
        if result.verdict not in rule_engine.LEVELS:
            continue
        rule = next(r for r in rules if r.name == result.rule)
        found = "; ".join(f"{f.subject}: {f.what}" for f in findings if f.metric == result.metric)
        if not found:
            found = (result.detail if result.value is None else
                     f"{result.metric} = {result.value:g}, the rule asks {result.criteria.strip()}")
        misses.append(Miss(result.verdict, f"{rule.name}: {found}" + (f" ({rule.action})" if rule.action else "")))
    return sorted(misses, key=lambda m: m.level != "FAIL")
