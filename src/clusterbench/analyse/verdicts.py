"""Verdicts: a run's metrics judged by rules, one line per check, PASS, WARN, FAIL or SKIP (not judged).

Pure: metrics and expected figures in, verdicts out, so `clusterbench run`, `clusterbench
report` and a fleet script see the same verdicts. `comm` and `train` end with exit code 1 when
a check of their own stage FAILs; `run` when any check does.
"""

from __future__ import annotations

from clusterbench.analyse.metrics import Metrics
from clusterbench.analyse.rules import Rule, RuleResult, default_rules, evaluate
from clusterbench.results.schema import Expected, Verdict

RANKED = ("PASS", "WARN", "FAIL")
_SHOWN = 3  # results named in one line before "and N more"


def judge(metrics: Metrics, expected: dict[str, Expected], rules: list[Rule] | None = None) -> list[Verdict]:
    """One verdict per rule (the default rules unless given), in the rules' order."""
    # strict=False: a rule that matches nothing in a run just measured FAILs visibly, with the
    # report still written, rather than throwing the measurements' conclusion away.
    results = evaluate(rules if rules is not None else default_rules(), metrics, expected=expected, strict=False)
    by_rule: dict[str, list[RuleResult]] = {}
    for r in results:
        by_rule.setdefault(r.rule, []).append(r)
    return [_verdict(name, found) for name, found in by_rule.items()]


def _verdict(name: str, results: list[RuleResult]) -> Verdict:
    judged = [r for r in results if r.verdict in RANKED]
    if not judged:
        return Verdict(name, "SKIP", results[0].detail)
    status = max((r.verdict for r in judged), key=RANKED.index)
    shown = [r for r in judged if r.verdict == status]
    detail = "; ".join(r.detail for r in shown[:_SHOWN])
    if len(shown) > _SHOWN:
        detail += f"; and {len(shown) - _SHOWN} more"
    return Verdict(name, status, detail)


def overall(verdicts: list[Verdict]) -> str | None:
    """The worst of the judged checks; None when no check was judged (a verdict over nothing says nothing)."""
    return max((v.status for v in verdicts if v.status in RANKED), key=RANKED.index, default=None)
