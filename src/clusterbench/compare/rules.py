"""Acceptance rules in the SuperBench style, read from YAML.

    rules:
      - name: all_reduce bandwidth             # optional; defaults to "rule <n>"
        metric: comm.all_reduce.busbw_gbps.large   # glob, or "re:<regex>"; or a list of them
        function: value                        # value: the metric itself; change: (value - base) / base
        criteria: ">= 2400"                    # <, <=, >, >=, ==, != and a number
        summary: NVLink all_reduce at large sizes

A rule checks every metric its patterns match; one that matches nothing is an error, so a
typo cannot pass silently.
"""

from __future__ import annotations

import fnmatch
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from clusterbench.errors import UsageError

FUNCTIONS = ("value", "change")
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "<": operator.lt, ">": operator.gt,
}
_CRITERIA = re.compile(r"\s*(<=|>=|==|!=|<|>)\s*([-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)\s*")
_KEYS = {"name", "metric", "function", "criteria", "summary"}


@dataclass(frozen=True)
class Rule:
    name: str
    patterns: tuple[str, ...]
    function: str
    criteria: str
    summary: str

    def test(self, x: float) -> bool:
        op, limit = _parse_criteria(self.criteria, self.name)
        return _OPS[op](x, limit)


@dataclass(frozen=True)
class RuleResult:
    rule: str
    metric: str
    value: float | None
    baseline: float | None
    checked: float | None  # the value the criteria judged: the metric, or its relative change
    criteria: str
    verdict: str  # PASS or FAIL
    summary: str


def load_rules(path: str | Path) -> list[Rule]:
    """Read and check a rules file; every problem is a UsageError naming where it is."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read rules file {p}: {getattr(e, 'strerror', None) or e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UsageError(f"rules file {p}{where} does not parse: {problem}") from None
    items = data.get("rules") if isinstance(data, dict) else data
    if not isinstance(items, list) or not items:
        raise UsageError(f"rules file {p}: expected a list of rules (or a mapping with a 'rules' list)")
    return [_rule(item, i, p) for i, item in enumerate(items, 1)]


def _rule(item: Any, index: int, path: Path) -> Rule:
    where = f"rules file {path}, rule {index}"
    if not isinstance(item, dict):
        raise UsageError(f"{where}: expected a mapping with metric, function and criteria")
    unknown = set(item) - _KEYS
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; use {sorted(_KEYS)}")
    name = str(item.get("name") or f"rule {index}")
    patterns = item.get("metric")
    patterns = [patterns] if isinstance(patterns, str) else patterns
    if not patterns or not all(isinstance(x, str) and x for x in patterns):
        raise UsageError(f"{where} ({name}): 'metric' must be a pattern or a list of patterns")
    function = item.get("function", "value")
    if function not in FUNCTIONS:
        raise UsageError(f"{where} ({name}): function {function!r} is not one of {', '.join(FUNCTIONS)}")
    criteria = str(item.get("criteria", ""))
    _parse_criteria(criteria, f"{where} ({name})")
    for pattern in patterns:
        if pattern.startswith("re:"):
            try:
                re.compile(pattern[3:])
            except re.error as e:
                raise UsageError(f"{where} ({name}): bad regex {pattern[3:]!r}: {e}") from None
    return Rule(name, tuple(patterns), function, criteria, str(item.get("summary") or ""))


def _parse_criteria(text: str, where: str) -> tuple[str, float]:
    match = _CRITERIA.fullmatch(text)
    if not match:
        raise UsageError(f"{where}: criteria {text!r} must be a comparison and a number, like '>= 0.9'")
    return match.group(1), float(match.group(2))


def matches(pattern: str, name: str) -> bool:
    if pattern.startswith("re:"):
        return re.fullmatch(pattern[3:], name) is not None
    return fnmatch.fnmatchcase(name, pattern)


def evaluate(rules: list[Rule], metrics: dict[str, float], baseline: dict[str, float] | None) -> list[RuleResult]:
    """Judge `metrics` (and their change against `baseline` for change rules)."""
    results = []
    for rule in rules:
        if rule.function == "change" and baseline is None:
            raise UsageError(f"rule {rule.name!r} uses function change and needs a baseline: "
                             "give a second run or --baseline")
        names = sorted(n for n in metrics if any(matches(p, n) for p in rule.patterns))
        if not names:
            raise UsageError(f"rule {rule.name!r}: metric pattern {', '.join(rule.patterns)} matches no metric")
        results += [_judge(rule, name, metrics[name], baseline) for name in names]
    return results


def _judge(rule: Rule, name: str, value: float, baseline: dict[str, float] | None) -> RuleResult:
    base = baseline.get(name) if baseline is not None else None
    checked: float | None = value
    if rule.function == "change":
        # No baseline value (or zero) to relate to: the rule cannot be met.
        checked = (value - base) / base if base else None
    verdict = "PASS" if checked is not None and rule.test(checked) else "FAIL"
    return RuleResult(rule.name, name, value, base, checked, rule.criteria, verdict, rule.summary)
