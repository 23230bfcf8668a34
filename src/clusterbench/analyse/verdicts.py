"""Verdicts: a run's metrics judged by rules, one line per check, PASS, WARN, FAIL or SKIP (not judged).

Pure: metrics and expected figures in, verdicts out, so `clusterbench run`, `clusterbench
report` and a fleet script see the same verdicts. `comm` and `train` end with exit code 1 when
a check of their own stage FAILs; `run` when any check does. Two rules hold wherever a verdict
is summarised: the summary is the worst of what it summarises (one WARN makes a WARN), and a
summary over nothing judged is no verdict at all (exit 2), never a PASS.
"""

from __future__ import annotations

from collections.abc import Iterable

from clusterbench.analyse.metrics import Metrics
from clusterbench.analyse.rules import Rule, RuleResult, evaluate
from clusterbench.errors import UsageError
from clusterbench.results.run import Expected, Verdict

RANKED = ("PASS", "WARN", "FAIL")
_SHOWN = 3  # results named in one line before "and N more"


def judge(metrics: Metrics, expected: dict[str, Expected], rules: list[Rule]) -> list[Verdict]:
    """One verdict per rule, in the rules' order."""
    # strict=False: a rule that matches nothing in a run just measured FAILs visibly, with the
    # report still written, rather than throwing the measurements' conclusion away.
    results = evaluate(rules, metrics, expected=expected, strict=False)
    by_rule: dict[str, list[RuleResult]] = {}
    for r in results:
        by_rule.setdefault(r.rule, []).append(r)
    return [_verdict(name, found) for name, found in by_rule.items()]


def _verdict(name: str, results: list[RuleResult]) -> Verdict:
    status = worst(r.verdict for r in results)
    if status is None:
        return Verdict(name, "SKIP", results[0].detail)
    shown = [r for r in results if r.verdict == status]
    detail = "; ".join(r.detail for r in shown[:_SHOWN])
    if len(shown) > _SHOWN:
        detail += f"; and {len(shown) - _SHOWN} more"
    return Verdict(name, status, detail)


def worst(statuses: Iterable[str]) -> str | None:
    """The worst of PASS, WARN and FAIL among `statuses`; None when none is one of them (nothing judged)."""
    return max((s for s in statuses if s in RANKED), key=RANKED.index, default=None)


def overall(verdicts: list[Verdict]) -> str | None:
    """The worst of the judged checks; None when no check was judged (a verdict over nothing says nothing)."""
    return worst(v.status for v in verdicts)


def conclusive(verdict: str | None, what: str) -> str:
    """`verdict` when something was judged; else the one-line refusal every command gives (exit 2)."""
    if verdict is None:
        raise UsageError(f"nothing judged: {what}, so there is no verdict")
    return verdict
