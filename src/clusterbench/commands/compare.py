"""`clusterbench compare`: run B against run A, a baseline or rules. Exit 0 pass, 1 fail, 2 bad input."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from clusterbench import argtypes
from clusterbench.analyse import baseline
from clusterbench.analyse.compare import DEFAULT_TOLERANCE, Comparison, compare, lost, unfinished, worse
from clusterbench.analyse.rules import RuleResult, evaluate, load_rules
from clusterbench.analyse.verdicts import conclusive, worst
from clusterbench.errors import EXIT_FAILED, EXIT_OK, UsageError
from clusterbench.runtime.command import ToolCommand
from clusterbench.stages.registry import load_run, metrics_of


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_a", metavar="A", help="the reference run folder (or the run to judge, with --baseline)")
    p.add_argument("run_b", metavar="B", nargs="?", help="the run folder judged against A")
    p.add_argument("--baseline", metavar="FILE", help="judge A against this baseline (from clusterbench baseline)")
    p.add_argument("--rules", metavar="YAML", help="acceptance rules; they replace the default tolerance")
    p.add_argument("--tolerance", type=argtypes.real(0.0, strict=False), default=DEFAULT_TOLERANCE,
                   help=f"relative worsening that fails a metric (default {DEFAULT_TOLERANCE:g} = 5 %%)")
    p.add_argument("--all", action="store_true", help="also compare busbw at every message size")
    p.add_argument("--json", action="store_true", help="print the results as JSON")


def main(args: argparse.Namespace) -> int:
    if args.run_b and args.baseline:
        raise UsageError("give either a second run B or --baseline, not both")
    if not (args.run_b or args.baseline or args.rules):
        raise UsageError("nothing to compare A with: give a second run B, --baseline FILE or --rules YAML")
    rules = load_rules(args.rules) if args.rules else None
    first = load_run(args.run_a)
    runs = {"A": first}
    if args.run_b:
        runs["B"] = candidate = load_run(args.run_b)
        reference = metrics_of(first).values
    elif args.baseline:
        reference, candidate = baseline.load_means(args.baseline), first
    else:
        reference, candidate = None, first
    problems = unfinished(runs)  # a run that failed or stopped is not compared as if it had completed
    if rules is not None:
        results = evaluate(rules, metrics_of(candidate), reference, candidate.expected)
        bad = [r for r in results if r.verdict == "FAIL"]
        if bad:
            problems.insert(0, f"{len(bad)} of {len(results)} checks fail")
        status = "FAIL" if problems else worst(r.verdict for r in results)
        passed = sum(r.verdict == "PASS" for r in results)
        others = ", ".join(f"{sum(r.verdict == v for r in results)} {v}" for v in ("WARN", "SKIP")
                           if any(r.verdict == v for r in results))
        verdict = (f"FAIL: {'; '.join(problems)}" if problems else
                   f"{status}: {passed} of {len(results)} checks pass" + (f" ({others})" if others else ""))
        _print(results, args.json, _rules_text(results), f"# rules: {verdict}" if status else None)
        conclusive(status, "every rule was skipped (SKIP) or ignored")
        return EXIT_FAILED if problems else EXIT_OK
    rows = compare(reference, metrics_of(candidate).values, args.tolerance, per_size=args.all)
    for found, what in ((lost(rows), "judged metrics missing in the run judged"),
                        (worse(rows), f"metrics worse by more than {args.tolerance:.0%}")):
        if found:
            problems.insert(0, f"{len(found)} {what}: {_names(found)}")
    status = "FAIL" if problems else worst(r.verdict for r in rows)
    verdict = f"FAIL: {'; '.join(problems)}" if problems else (
        f"PASS: no metric worse by more than {args.tolerance:.0%}")
    _print(rows, args.json, _compare_text(rows), f"# compare: {verdict}" if status else None)
    conclusive(status, "no metric that has a better direction was measured in both")
    return EXIT_FAILED if problems else EXIT_OK


def _names(rows: list) -> str:
    return ", ".join(r.metric for r in rows[:5]) + (f" and {len(rows) - 5} more" if len(rows) > 5 else "")


def _print(rows: list, as_json: bool, text: str, verdict: str | None) -> None:
    """The table and verdict on stdout; with --json stdout is pure JSON and the verdict goes to stderr.
    No verdict (nothing judged): the table alone, and the error line says why."""
    if as_json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
        if verdict:
            print(verdict, file=sys.stderr)
    else:
        print(text if verdict is None else f"{text}\n{verdict}")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _compare_text(rows: list[Comparison]) -> str:
    width = max([len(r.metric) for r in rows] + [6])
    lines = [f"{'metric':<{width}}  {'A':>11}  {'B':>11}  {'B/A':>7}  {'better':<6}  verdict"]
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.3f}"
        lines.append(f"{r.metric:<{width}}  {_fmt(r.reference):>11}  {_fmt(r.candidate):>11}  {ratio:>7}  "
                     f"{r.better or '-':<6}  {r.verdict}")
    return "\n".join(lines)


def _rules_text(rows: list[RuleResult]) -> str:
    width = max([len(r.metric) for r in rows] + [6])
    head = f"{'rule':<20}  {'metric':<{width}}  {'value':>11}  {'baseline':>11}  {'checked':>11}  {'criteria':<10}"
    lines = [f"{head}  verdict"]
    for r in rows:
        lines.append(f"{r.rule[:20]:<20}  {r.metric:<{width}}  {_fmt(r.value):>11}  {_fmt(r.baseline):>11}  "
                     f"{_fmt(r.checked):>11}  {r.criteria:<10}  {r.verdict}")
    return "\n".join(lines)


COMMAND = ToolCommand("compare", "judge run B against run A, a baseline or rules (exit 1 on fail)", add_arguments, main)
