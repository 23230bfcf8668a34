"""Acceptance rules in the SuperBench style, read from YAML: every verdict clusterbench gives is one.

    rules:
      - name: comm bandwidth                    # the check's name; defaults to "rule <n>"
        metric: comm.all_reduce.link_share      # glob, or "re:<regex>"; or a list of them
        function: value                         # value: the metric; change: (value - baseline) / baseline;
                                                # expected: value / the run's expected figure
        origin: [shipped, file]                 # expected only: whose figures (given: --expect-busbw,
                                                # file: --expected FILE, shipped: the shipped table);
                                                # default given, what `expected` judged before there
                                                # were tables, so older rules files keep their meaning
        criteria: ">= 0.6"                      # <, <=, >, >=, ==, != and a number
        level: WARN                             # what a miss is: WARN or FAIL (default)
        missing: skip                           # no such metric in this run: error (default: a typo
                                                # must not pass), skip (listed as not judged),
                                                # ignore (not listed), WARN or FAIL
        summary: all_reduce busbw against the link's theoretical figure

A rule about a stage that did not run (no comm rows, no train section) is not judged, whatever
its `missing` says. `clusterbench run` judges with the shipped default_rules.yaml unless given
--rules; `clusterbench compare --rules` with the file it is given.
"""

from __future__ import annotations

import fnmatch
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from clusterbench.analyse.expected import whose
from clusterbench.analyse.metrics import Metrics
from clusterbench.errors import UsageError
from clusterbench.results.schema import Expected

FUNCTIONS = ("value", "change", "expected")
LEVELS = ("WARN", "FAIL")
MISSING = ("error", "skip", "ignore", *LEVELS)
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "<": operator.lt, ">": operator.gt,
}
_CRITERIA = re.compile(r"\s*(<=|>=|==|!=|<|>)\s*([-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)\s*")
_KEYS = {"name", "metric", "function", "criteria", "summary", "level", "missing", "origin"}
ORIGINS = ("given", "file", "shipped")


@dataclass(frozen=True)
class Rule:
    name: str
    patterns: tuple[str, ...]
    function: str
    criteria: str
    summary: str = ""
    level: str = "FAIL"
    missing: str = "error"
    origin: tuple[str, ...] = ("given",)  # the expected figures a rule of function expected judges against

    def test(self, x: float) -> bool:
        op, limit = _parse_criteria(self.criteria, self.name)
        return _OPS[op](x, limit)


@dataclass(frozen=True)
class RuleResult:
    rule: str
    metric: str
    value: float | None
    baseline: float | None  # the baseline's value (change) or the expected figure (expected)
    checked: float | None  # the value the criteria judged
    criteria: str
    verdict: str  # PASS, WARN, FAIL, or SKIP (not judged)
    summary: str
    detail: str  # the result in words


def default_rules_path() -> Path:
    return Path(str(files("clusterbench.analyse") / "default_rules.yaml"))


def default_rules() -> list[Rule]:
    return load_rules(default_rules_path())


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
    where = f"{where} ({name})"
    patterns = item.get("metric")
    patterns = [patterns] if isinstance(patterns, str) else patterns
    if not patterns or not all(isinstance(x, str) and x for x in patterns):
        raise UsageError(f"{where}: 'metric' must be a pattern or a list of patterns")
    for pattern in patterns:
        if pattern.startswith("re:"):
            try:
                re.compile(pattern[3:])
            except re.error as e:
                raise UsageError(f"{where}: bad regex {pattern[3:]!r}: {e}") from None
    choices = {"function": (FUNCTIONS, "value"), "level": (LEVELS, "FAIL"), "missing": (MISSING, "error")}
    chosen = {}
    for key, (allowed, default) in choices.items():
        chosen[key] = item.get(key, default)
        if chosen[key] not in allowed:
            raise UsageError(f"{where}: {key} {chosen[key]!r} is not one of {', '.join(allowed)}")
    criteria = str(item.get("criteria", ""))
    _parse_criteria(criteria, where)
    origin = item.get("origin", ["given"])
    origin = [origin] if isinstance(origin, str) else origin
    if not isinstance(origin, list) or not origin or not set(origin) <= set(ORIGINS):
        raise UsageError(f"{where}: origin {item.get('origin')!r} must be one or more of {', '.join(ORIGINS)}")
    return Rule(name, tuple(patterns), criteria=criteria, summary=str(item.get("summary") or ""),
                origin=tuple(origin), **chosen)


def _parse_criteria(text: str, where: str) -> tuple[str, float]:
    match = _CRITERIA.fullmatch(text)
    if not match:
        raise UsageError(f"{where}: criteria {text!r} must be a comparison and a number, like '>= 0.9'")
    return match.group(1), float(match.group(2))


def matches(pattern: str, name: str) -> bool:
    if pattern.startswith("re:"):
        return re.fullmatch(pattern[3:], name) is not None
    return fnmatch.fnmatchcase(name, pattern)


def evaluate(rules: list[Rule], metrics: Metrics, baseline: dict[str, float] | None = None,
             expected: dict[str, Expected] | None = None, strict: bool = True) -> list[RuleResult]:
    """Judge `metrics`: their values, their change against `baseline`, or their share of `expected`.

    A rule whose metric is missing and says `missing: error` is a UsageError when `strict`;
    otherwise (judging a run that has just been measured) it is a FAIL that says so."""
    results = []
    for rule in rules:
        if rule.function == "change" and baseline is None:
            raise UsageError(f"rule {rule.name!r} uses function change and needs a baseline: "
                             "give a second run or --baseline")
        figures = {name: e.value for name, e in (expected or {}).items() if e.origin in rule.origin}
        reference = {"change": baseline, "expected": figures}.get(rule.function)
        names = sorted(n for n in metrics.values if any(matches(p, n) for p in rule.patterns)
                       and (rule.function != "expected" or n in reference))
        if names:
            results += [_judge(rule, name, metrics, reference, (expected or {}).get(name)) for name in names]
        elif rule.missing != "ignore":
            result = _not_judged(rule, metrics)
            if strict and rule.missing == "error" and result.verdict != "SKIP":
                raise UsageError(f"rule {rule.name!r}: metric pattern {', '.join(rule.patterns)} matches no metric")
            results.append(result)
    return results


def _family(pattern: str) -> str:
    """The first part of the names a pattern can match: comm, train, peaks, ..."""
    return re.match(r"[a-z_]*", pattern.removeprefix("re:")).group(0)


def _not_judged(rule: Rule, metrics: Metrics) -> RuleResult:
    """A rule without a metric: SKIP when its stage did not run, else what its `missing` says."""
    stage = next((metrics.not_run[f] for f in map(_family, rule.patterns) if f in metrics.not_run), None)
    why = stage or next((text for name, text in metrics.absent.items()
                         if any(matches(p, name) for p in rule.patterns)), None)
    if why is None:
        why = (f"no expected figure for {', '.join(rule.patterns)}" if rule.function == "expected"
               else f"this run has no {', '.join(rule.patterns)}")
    verdict = "SKIP" if stage else {"skip": "SKIP", "error": "FAIL"}.get(rule.missing, rule.missing)
    if verdict == "FAIL" and rule.missing == "error":
        why += " (the rule says a missing metric is an error: check its pattern)"
    return RuleResult(rule.name, ", ".join(rule.patterns), None, None, None, rule.criteria, verdict, rule.summary,
                      f"not judged: {why}")


def _judge(rule: Rule, name: str, metrics: Metrics, reference: dict[str, float] | None,
           figure: Expected | None) -> RuleResult:
    value = metrics.values[name]
    base = reference.get(name) if reference is not None else None
    checked: float | None = value
    words = metrics.notes.get(name) or f"{name} = {value:.4g}"
    if rule.function == "change":
        # No baseline value (or zero) to relate to: the rule cannot be met.
        checked = (value - base) / base if base else None
        words += f" ({'no baseline value' if checked is None else f'{checked:+.1%} against the baseline'})"
    elif rule.function == "expected":
        checked = value / base if base else None
        source = whose(figure) if figure else "the expected figure"
        words += f" = {checked:.0%} of {source}" if checked is not None else ""
    ok = checked is not None and rule.test(checked)
    if not ok:
        subject = {"value": name, "change": "change", "expected": "value / expected"}[rule.function]
        words += f"; rule: {subject} {rule.criteria.strip()}"
    return RuleResult(rule.name, name, value, base, checked, rule.criteria, "PASS" if ok else rule.level,
                      rule.summary, words)
