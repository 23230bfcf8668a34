"""`clusterbench compare` and `clusterbench baseline`: exit 0 pass, 1 fail, 2 bad input."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from clusterbench.compare import baseline
from clusterbench.compare.compare import DEFAULT_TOLERANCE, Comparison, compare, failed
from clusterbench.compare.metrics import flatten
from clusterbench.compare.rules import RuleResult, evaluate, load_rules
from clusterbench.errors import UsageError
from clusterbench.results import load_run

EXIT_PASS, EXIT_FAIL = 0, 1


def add_compare_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_a", metavar="A", help="the reference run folder (or the run to judge, with --baseline)")
    p.add_argument("run_b", metavar="B", nargs="?", help="the run folder judged against A")
    p.add_argument("--baseline", metavar="FILE", help="judge A against this baseline (from clusterbench baseline)")
    p.add_argument("--rules", metavar="YAML", help="acceptance rules; they replace the default tolerance")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                   help=f"relative worsening that fails a metric (default {DEFAULT_TOLERANCE:g} = 5 %%)")
    p.add_argument("--all", action="store_true", help="also compare busbw at every message size")
    p.add_argument("--json", action="store_true", help="print the results as JSON")


def add_baseline_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", metavar="RUN_DIR", nargs="+", help="run folders to summarise")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="baseline JSON to write")


def compare_main(args: argparse.Namespace) -> int:
    if args.run_b and args.baseline:
        raise UsageError("give either a second run B or --baseline, not both")
    if not (args.run_b or args.baseline or args.rules):
        raise UsageError("nothing to compare A with: give a second run B, --baseline FILE or --rules YAML")
    if args.tolerance < 0:
        raise UsageError(f"--tolerance must not be negative, got {args.tolerance:g}")
    rules = load_rules(args.rules) if args.rules else None
    first = flatten(load_run(args.run_a))
    if args.run_b:
        reference, candidate = first, flatten(load_run(args.run_b))
    elif args.baseline:
        reference, candidate = baseline.load_means(args.baseline), first
    else:
        reference, candidate = None, first
    if rules is not None:
        results = evaluate(rules, candidate, reference)
        bad = [r for r in results if r.verdict == "FAIL"]
        verdict = f"{'FAIL' if bad else 'PASS'}: {len(results) - len(bad)} of {len(results)} checks pass"
        _print(results, args.json, _rules_text(results), f"# rules: {verdict}")
        return EXIT_FAIL if bad else EXIT_PASS
    rows = compare(reference, candidate, args.tolerance, per_size=args.all)
    bad = failed(rows)
    names = ", ".join(r.metric for r in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
    verdict = f"FAIL: {len(bad)} metrics worse by more than {args.tolerance:.0%}: {names}" if bad else (
        f"PASS: no metric worse by more than {args.tolerance:.0%}")
    _print(rows, args.json, _compare_text(rows), f"# compare: {verdict}")
    return EXIT_FAIL if bad else EXIT_PASS


def baseline_main(args: argparse.Namespace) -> int:
    doc = baseline.build(args.runs)
    path = baseline.write(doc, args.output)
    print(f"# baseline: {len(doc['metrics'])} metrics over {len(args.runs)} runs -> {path}")
    return EXIT_PASS


def _print(rows: list, as_json: bool, text: str, verdict: str) -> None:
    """The table and verdict on stdout; with --json stdout is pure JSON and the verdict goes to stderr."""
    if as_json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
        print(verdict, file=sys.stderr)
    else:
        print(f"{text}\n{verdict}")


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
