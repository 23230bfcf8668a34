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
        action: reset the GPU                   # what to do when it misses, shown beside the verdict
                                                # (the node rules give one to each); default: none

A rule about a stage that did not run (no comm rows, no train section) is not judged, whatever
its `missing` says; a figure that is NaN or infinite is missing (metrics.py), so no rule passes it.
Every field is checked for its type, and a regex is matched with a bound on its cost
(inputs.patterns). `clusterbench run` judges with the shipped default_rules.yaml and the rules.yaml a stage
ships beside its stage.py unless given --rules; `clusterbench compare --rules` with the file it is given.
"""

from __future__ import annotations

import fnmatch
import functools
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from clusterbench.analyse.expected import whose
from clusterbench.analyse.metrics import Metrics
from clusterbench.argtypes import clipped
from clusterbench.errors import UsageError
from clusterbench.inputs import documents, patterns
from clusterbench.results.run import Expected

FUNCTIONS = ("value", "change", "expected")
LEVELS = ("WARN", "FAIL")
MISSING = ("error", "skip", "ignore", *LEVELS)
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "<": operator.lt, ">": operator.gt,
}
_CRITERIA = re.compile(r"\s*(<=|>=|==|!=|<|>)\s*([-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)\s*")
_KEYS = {"name", "metric", "function", "criteria", "summary", "level", "missing", "origin", "action"}
ORIGINS = ("given", "file", "shipped")
# ">= 0.9" and the like; a longer text is no criteria, and _CRITERIA's digits would backtrack over it.
_CRITERIA_MAX = 64


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
    action: str = ""  # what to do about a miss, in words; "": the rule recommends nothing

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


def shared_rules() -> list[Rule]:
    """The rules clusterbench ships in default_rules.yaml; a stage may ship its own besides
    (stages.registry.default_rules)."""
    return load_rules(default_rules_path())


def load_rules(path: str | Path) -> list[Rule]:
    """Read and check a rules file; every problem is a UsageError naming where it is."""
    p = Path(path)
    data = documents.read_yaml(p, f"cannot read rules file {p}")
    items = data.get("rules") if isinstance(data, dict) else data
    if not isinstance(items, list) or not items:
        raise UsageError(f"rules file {p}: expected a list of rules (or a mapping with a 'rules' list)")
    return [_rule(item, i, p) for i, item in enumerate(items, 1)]


def _text(item: dict[str, Any], key: str, where: str, default: str) -> str:
    """A field that must be text when given: a number or a list there is a mistake, not a name."""
    value = item.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise UsageError(f"{where}: {key} must be text, not {_kind(value)} {clipped(repr(value))}")
    return value


def _texts(item: dict[str, Any], key: str, where: str, default: list[str]) -> list[str]:
    """A field of one line of text or a list of them, none empty: metric patterns and origins, which
    error lines repeat."""
    value = item.get(key, default)
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not value or not all(isinstance(x, str) and x.isprintable() and x
                                                           for x in value):
        raise UsageError(f"{where}: {key} must be one line of text or a list of them, "
                         f"not {clipped(repr(item.get(key)))}")
    return value


def _kind(value: Any) -> str:
    return {bool: "true/false", int: "a number", float: "a number", list: "a list", dict: "a mapping"}.get(
        type(value), type(value).__name__)


def _rule(item: Any, index: int, path: Path) -> Rule:
    where = f"rules file {path}, rule {index}"
    if not isinstance(item, dict):
        raise UsageError(f"{where}: expected a mapping with metric, function and criteria")
    unknown = set(item) - _KEYS
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; use {sorted(_KEYS)}")
    name = _text(item, "name", where, "") or f"rule {index}"
    where = f"{where} ({clipped(' '.join(name.split()))})"  # one line, however the name was written
    if "metric" not in item:
        raise UsageError(f"{where}: 'metric' must be a pattern or a list of patterns")
    metric = _texts(item, "metric", where, [])
    for pattern in metric:
        if pattern.startswith("re:"):
            patterns.compile_pattern(pattern[3:], f"{where}: metric")
    choices = {"function": (FUNCTIONS, "value"), "level": (LEVELS, "FAIL"), "missing": (MISSING, "error")}
    chosen = {}
    for key, (allowed, default) in choices.items():
        chosen[key] = item.get(key, default)
        if not isinstance(chosen[key], str) or chosen[key] not in allowed:
            raise UsageError(f"{where}: {key} {clipped(repr(chosen[key]))} is not one of {', '.join(allowed)}")
    criteria = _text(item, "criteria", where, "")
    _parse_criteria(criteria, where)
    origin = _texts(item, "origin", where, ["given"])
    if not set(origin) <= set(ORIGINS):
        raise UsageError(f"{where}: origin {clipped(repr(item.get('origin')))} must be one or more of "
                         f"{', '.join(ORIGINS)}")
    action = _text(item, "action", where, "")
    if not action.isprintable():
        raise UsageError(f"{where}: action must be one line of text")
    return Rule(name, tuple(metric), criteria=criteria, summary=_text(item, "summary", where, ""),
                origin=tuple(origin), action=action, **chosen)


def _parse_criteria(text: str, where: str) -> tuple[str, float]:
    match = _CRITERIA.fullmatch(text) if len(text) <= _CRITERIA_MAX else None
    if not match or not math.isfinite(float(match.group(2))):
        raise UsageError(f"{where}: criteria {clipped(repr(text))} must be a comparison and a finite number, "
                         "like '>= 0.9'")
    return match.group(1), float(match.group(2))


@functools.lru_cache(maxsize=256)
def _regex(text: str) -> Any:
    return patterns.compile_pattern(text, "rule metric")


def matches(pattern: str, name: str, label: str = "rule metric") -> bool:
    """Whether a rule's metric pattern (a glob, or "re:" and a regex matched with a bound on its cost) names `name`."""
    if pattern.startswith("re:"):
        return patterns.fullmatch(_regex(pattern[3:]), name, label)
    return fnmatch.fnmatchcase(name, pattern)


def evaluate(rules: list[Rule], metrics: Metrics, baseline: dict[str, float] | None = None,
             expected: dict[str, Expected] | None = None, strict: bool = True) -> list[RuleResult]:
    """Judge `metrics`: their values, their change against `baseline`, or their share of `expected`.

    A rule whose pattern matches no metric of any kind (a typo) and says `missing: error` is a
    UsageError when `strict`; otherwise (judging a run that has just been measured) it is a FAIL
    that says so. A metric the run has no finite value of is missing, never judged."""
    results = []
    for rule in rules:
        if rule.function == "change" and baseline is None:
            raise UsageError(f"rule {clipped(repr(rule.name))} uses function change and needs a baseline: "
                             "give a second run or --baseline")
        label = f"rule {clipped(repr(rule.name))}: metric"
        figures = {name: e.value for name, e in (expected or {}).items() if e.origin in rule.origin}
        reference = {"change": baseline, "expected": figures}.get(rule.function)
        names = sorted(n for n in metrics.values if any(matches(p, n, label) for p in rule.patterns)
                       and (rule.function != "expected" or n in reference))
        if names:
            results += [_judge(rule, name, metrics, reference, (expected or {}).get(name)) for name in names]
        elif rule.missing != "ignore":
            why, not_run = _why_missing(rule, metrics, label)
            if strict and why is None and rule.missing == "error":
                raise UsageError(f"{label} pattern {clipped(', '.join(rule.patterns))} matches no metric")
            results.append(_not_judged(rule, why, not_run))
    return results


def _family(pattern: str) -> str:
    """The first part of the names a pattern can match: comm, train, peaks, ..."""
    return re.match(r"[a-z_]*", pattern.removeprefix("re:")).group(0)


def _why_missing(rule: Rule, metrics: Metrics, label: str) -> tuple[str | None, bool]:
    """Why this run has none of the rule's metrics, and whether it is because their stage did not run;
    None when no metric of any kind matches the pattern (a typo, or a metric of another kind of run)."""
    stage = next((metrics.not_run[f] for f in map(_family, rule.patterns) if f in metrics.not_run), None)
    if stage:
        return stage, True
    return next((text for name, text in metrics.absent.items()
                 if any(matches(p, name, label) for p in rule.patterns)), None), False


def _not_judged(rule: Rule, why: str | None, not_run: bool) -> RuleResult:
    """A rule without a metric: SKIP when its stage did not run, else what its `missing` says."""
    verdict = "SKIP" if not_run else {"skip": "SKIP", "error": "FAIL"}.get(rule.missing, rule.missing)
    if why is None:
        why = (f"no expected figure for {', '.join(rule.patterns)}" if rule.function == "expected"
               else f"this run has no {', '.join(rule.patterns)}")
        if verdict == "FAIL" and rule.missing == "error":
            why += " (the rule says a missing metric is an error: check its pattern)"
    return RuleResult(rule.name, ", ".join(rule.patterns), None, None, None, rule.criteria, verdict, rule.summary,
                      f"not judged: {why}")


def _judge(rule: Rule, name: str, metrics: Metrics, reference: dict[str, float] | None,
           figure: Expected | None) -> RuleResult:
    value = metrics.values[name]
    base = reference.get(name) if reference is not None else None
    base = base if base is not None and math.isfinite(base) else None  # a NaN baseline is no baseline
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
    # A figure that overflowed on its way here (a value over a baseline of 1e-300) is no measurement either.
    ok = checked is not None and math.isfinite(checked) and rule.test(checked)
    if not ok:
        subject = {"value": name, "change": "change", "expected": "value / expected"}[rule.function]
        words += f"; rule: {subject} {rule.criteria.strip()}" + (f"; action: {rule.action}" if rule.action else "")
    return RuleResult(rule.name, name, value, base, checked, rule.criteria, "PASS" if ok else rule.level,
                      rule.summary, words)
