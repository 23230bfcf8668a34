"""`clusterbench check`: this node's health check within a time budget, the way Slurm runs one
(docs/methodology.md §20). Healthy: exit 0 and one line on stdout. Not: exit 1 and one line on
stderr, the reason. Fit for Slurm's HealthCheckProgram, Prolog and Epilog; --drain-on-fail drains
this node with the reason, --resume-on-pass resumes it where a check had drained it.

The checks run in a child process that this one watches: at the deadline the child is killed,
whatever it is stuck in (a hung GPU can hold a thread, and Python's signal handlers, as long as it
likes), and the failure is said all the same. Only proof drains a node: a check that failed, a device
check that outran a budget that left it time, or a set-up the node kept from a CPU. A budget too small
for the set-up, a set-up that failed, or a baseline that judges nobody is said (exit 2) and the node
left as it is. It keeps no run folder (a check every few minutes
must not litter); like any run, it is recorded in the results store and exported where asked.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shlex
import signal
import socket
import sys
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterbench import argtypes, publish
from clusterbench.analyse.baseline import bands_of
from clusterbench.analyse.rules import Rule
from clusterbench.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, RunFailed, UsageError, one_line
from clusterbench.nodechecks import node_rules
from clusterbench.nodechecks.bands import JUDGES_FROM
from clusterbench.nodechecks.table import NODE_CHECKS
from clusterbench.results.documents import Band, utc_stamp
from clusterbench.runtime.command import ToolCommand
from clusterbench.stages.fleet import actions
from clusterbench.stages.registry import load_run
from clusterbench.store.record import Figure, RunRecord

# Slurm kills a HealthCheckProgram after 60 s: a check that has not finished by 50 s still has
# the time to say why and to drain its node.
BUDGET_S = 50.0
MAX_BUDGET_S = 3600.0  # beyond an hour it is no quick check, and a typo more likely than a plan
# A set-up (the interpreter, torch) that spent this share of its life ready to run and not let (the kernel's
# run delay: a cgroup quota, a host's other load) was starved by its node, and a budget it outran is the node's
# fault. Waiting on a disk (torch from a cold cache or a network file system) is no such wait, and running
# throughout means the budget was too small. This 2-core VM busy with the test suite kept a check waiting 45 % of
# its time; a cgroup quota of a twentieth of a CPU, 96 %.
STARVED_SHARE = 0.8
# A device check that began with this much of the budget left had the time it sizes itself to: past the
# deadline it hung. Begun with less, the budget was too small for it.
FAIR_LEFT_S = 5.0
SCONTROL_TIMEOUT_S = 10.0  # scontrol's own MessageTimeout: a slurmctld that slow will not answer a retry either
DEBUG_ENV = "CLUSTERBENCH_DEBUG"
SETUP = "loading torch"


@dataclass(frozen=True)
class CheckOptions:
    budget: float
    gpus: int | None
    bands: list[Band] | None  # from --baseline; None: no baseline judges the figures
    tolerance: float
    numerics_steps: int
    rules: list[Rule]  # the node rules the counters are judged by
    node: str
    drain: bool
    resume: bool
    dry_run: bool
    verbose: bool
    outputs: publish.Outputs


@dataclass
class Outcome:
    """What the checks told the watcher, as they went."""

    running: str = SETUP
    since: float = 0.0  # when what is running began (time.monotonic())
    what: str = ""
    klass: str = ""
    figures: dict[tuple[str, str], float] = field(default_factory=dict)  # (device, metric): the last value
    checks: int = 0
    warnings: list[str] = field(default_factory=list)  # node rules of level WARN the counters missed
    done: bool = False
    reason: str | None = None  # None: healthy
    proof: bool = False  # the reason is the node's: it may be drained for it


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget", type=argtypes.real(0.0, maximum=MAX_BUDGET_S), default=BUDGET_S, metavar="SECONDS",
                   help="seconds every check together may take; past them the check fails, saying which check "
                        "was still running (default %(default)g: Slurm kills a HealthCheckProgram at 60)")
    p.add_argument("--gpus", type=argtypes.whole(0, 1024),
                   help="GPUs torch must see here (default: not checked; give it on GPU nodes, where a GPU "
                        "lost from the bus, or a driver that fails, shows only as fewer GPUs or none)")
    p.add_argument("--baseline", type=Path, metavar="RUN",
                   help="judge the figures by the bands of this node's hardware class in a fleet run (its folder "
                        "or run.json), or in a baseline from the store (baseline --from-store)")
    p.add_argument("--tolerance", type=argtypes.real(0.0, strict=False, maximum=1.0), default=0.1,
                   help="with --baseline: a figure is out when this far below its band's median, and 4 robust "
                        "spreads or half the median (default %(default)g, as clusterbench fleet)")
    p.add_argument("--numerics-steps", dest="numerics_steps", type=argtypes.whole(0, 100), default=4,
                   help="steps of the numerics task each device trains; 0: none (default %(default)d)")
    node_rules.add_argument(p)
    p.add_argument("--node", help="this node's name in Slurm (default: SLURMD_NODENAME, else the short host name)")
    p.add_argument("--drain-on-fail", dest="drain", action="store_true",
                   help="on failure, drain this node with scontrol, the reason beginning 'clusterbench check:'")
    p.add_argument("--resume-on-pass", dest="resume", action="store_true",
                   help="on a pass, resume this node if a check had drained it (a node drained for any other "
                        "reason stays drained)")
    p.add_argument("--dry-run", dest="dry_run", action="store_true",
                   help="print the scontrol commands instead of running them")
    p.add_argument("-v", "--verbose", action="store_true", help="print each check and figure as it comes")
    publish.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    started, started_utc = time.monotonic(), utc_stamp()
    options = prepare(args)
    outcome = watch(options, started + options.budget)
    code = conclude(options, outcome, time.monotonic() - started)
    publish.publish(record_of(options, outcome, started_utc), options.outputs, say=None)
    return code


def prepare(args: argparse.Namespace) -> CheckOptions:
    """Every option checked before anything is measured: a broken health check is a usage error, not a sick node."""
    if args.dry_run and not (args.drain or args.resume):
        raise UsageError("--dry-run prints the scontrol commands of --drain-on-fail and --resume-on-pass: add one")
    if not args.dry_run:
        for flag, given in (("--drain-on-fail", args.drain), ("--resume-on-pass", args.resume)):
            if given:
                actions.check_scontrol(flag)
    node = args.node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    # Every band, of any class: which class this node is, the checks find out.
    bands = bands_of(args.baseline, "--baseline", load_run) if args.baseline else None
    if bands is not None and all(b.nodes < JUDGES_FROM for b in bands):
        raise UsageError(f"--baseline {args.baseline}: its bands stand on {max(b.nodes for b in bands)} node(s) at "
                         f"most, and a band of fewer than {JUDGES_FROM} judges nobody (a fleet run of {JUDGES_FROM} "
                         "nodes of a class or more makes one)")
    return CheckOptions(args.budget, args.gpus, bands, args.tolerance, args.numerics_steps,
                        node_rules.load(args.node_rules), node, args.drain,
                        args.resume, args.dry_run, args.verbose, publish.outputs_of(args))


def watch(options: CheckOptions, deadline: float) -> Outcome:
    """The checks, run by a child, followed to their end or killed at `deadline` (time.monotonic())."""
    outcome = Outcome()
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()  # no torch in this process yet, and no thread: a clean fork
    if pid == 0:
        os.close(read_end)
        try:
            _checks(options, deadline, write_end)
        finally:
            os._exit(0)  # never back into the command line: the watcher speaks for both
    os.close(write_end)
    forked = outcome.since = time.monotonic()
    pending = b""
    late: float | None = None  # past the deadline: the share of its life the child waited to run
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_end], [], [], left)[0]:
                late = _waited(pid, time.monotonic() - forked)
                break
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                _take(outcome, *json.loads(line), verbose=options.verbose)
    finally:
        # Past the deadline, or this process interrupted: the child goes too. After its last word it is
        # exiting already, and a signal to it changes nothing.
        os.kill(pid, signal.SIGKILL)
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
    if late is not None:
        _late(outcome, options.budget, deadline, late)
    elif outcome.reason is None and not outcome.done:
        outcome.reason = f"the checks ended without a verdict while {outcome.running} ran ({_how(status)})"
        outcome.proof = outcome.running != SETUP  # a device check that brought its process down
    return outcome


def _waited(pid: int, life_s: float) -> float:
    """The share of `life_s` the process `pid` spent ready to run but not running (/proc/PID/schedstat's run
    delay); 0 where the kernel does not say, since nothing is then proven."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            delay_ns = int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0.0
    return delay_ns / 1e9 / life_s if life_s > 0 else 0.0


def _late(outcome: Outcome, budget: float, deadline: float, waited: float) -> None:
    """The checks outran the budget: the node's fault, or the budget's."""
    outcome.reason = f"did not finish within --budget {budget:g} s ({outcome.running} was still running"
    if outcome.running == SETUP:
        outcome.proof = waited >= STARVED_SHARE
        outcome.reason += (f", kept from a CPU {waited:.0%} of its time: this node starves its processes)"
                           if outcome.proof else
                           f", kept from a CPU {waited:.0%} of its time: the budget is too small for this node's "
                           "set-up)")
    else:
        left = deadline - outcome.since
        outcome.proof = left >= FAIR_LEFT_S
        outcome.reason += ")" if outcome.proof else f", begun with {max(left, 0):.1f} s left: the budget is too small)"


def _checks(options: CheckOptions, deadline: float, fd: int) -> None:
    """The child's part: every check, each step told to the watcher through `fd`."""
    def tell(kind: str, value: Any) -> None:
        os.write(fd, (json.dumps([kind, value]) + "\n").encode())

    debug = bool(os.environ.get(DEBUG_ENV))
    if not debug:
        # Warnings and C libraries' own lines (torch, CUDA, NCCL) would break the one-line contract.
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
    try:
        try:
            from clusterbench.nodechecks import health  # torch: loaded here, so the budget covers it
        except Exception as e:  # noqa: BLE001 - a broken install is no fault of the node's
            if debug:
                traceback.print_exc()
            tell("unjudged", f"the checks could not start: {one_line(e)}")
            return
        try:
            tell("passed", health.run(options.gpus, options.bands, options.tolerance, options.numerics_steps,
                                      deadline, tell, options.rules))
        except health.Unhealthy as e:
            tell("failed", str(e))
        except health.NotJudged as e:
            tell("unjudged", str(e))
    except Exception as e:  # noqa: BLE001 - a device that errors out fails its check: the error is the reason
        if debug:
            traceback.print_exc()
        tell("failed", one_line(e))


def _take(outcome: Outcome, kind: str, value: Any, verbose: bool) -> None:
    if kind == "check":
        outcome.running, outcome.since = f"the {value} check", time.monotonic()
        if verbose and value in NODE_CHECKS:
            check = NODE_CHECKS[value]
            print(f"# {value} ({check.kind}): {check.summary}", flush=True)
    elif kind == "node":
        outcome.what, outcome.klass = value
        if verbose:
            print(f"# {outcome.what}: {outcome.klass}", flush=True)
    elif kind == "figure":
        device, metric, figure, again = value
        outcome.figures[(device, metric)] = figure
        if verbose:
            print(f"  {device} {metric} {figure:.4g}{' (measured again)' if again else ''}", flush=True)
    elif kind == "copy":
        if verbose:
            subject, metric, text = value
            print(f"  {subject} {metric} {text}", flush=True)
    elif kind == "warning":
        outcome.warnings.append(value)
        if verbose:
            print(f"  warning: {value}", flush=True)
    elif kind == "passed":
        outcome.done, outcome.checks = True, value
    elif kind == "failed":
        outcome.done, outcome.reason, outcome.proof = True, value, True
    elif kind == "unjudged":
        outcome.done, outcome.reason = True, value


def _how(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"


def conclude(options: CheckOptions, outcome: Outcome, seconds: float) -> int:
    """The one line, this node drained or resumed as asked, and the exit code."""
    if outcome.reason is None:
        line = f"clusterbench check: healthy: {options.node} ({outcome.what}, {outcome.checks} checks, {seconds:.1f} s)"
        line += "".join(f"; warning: {w}" for w in outcome.warnings)
        try:
            line += _resume(options) if options.resume else ""
        except RunFailed as e:
            print(f"{line}, but resuming it failed: {e}", file=sys.stderr, flush=True)
            return EXIT_FAILED
        print(line, flush=True)
        return EXIT_OK
    line = f"clusterbench check: {options.node}: {outcome.reason}"
    if not outcome.proof:
        print(f"{line}; not judged{', not drained' if options.drain else ''}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    if options.drain:
        try:
            line += _drain(options, outcome.reason)
        except RunFailed as e:
            line += f"; draining it failed: {e}"
    print(line, file=sys.stderr, flush=True)
    return EXIT_FAILED


def _drain(options: CheckOptions, reason: str) -> str:
    argv = actions.drain_command(options.node, f"{actions.CHECK_REASON} {reason}")
    if options.dry_run:
        print(f"would run: {shlex.join(argv)}", flush=True)
        return ""
    held = actions.drain_reason(options.node, SCONTROL_TIMEOUT_S)
    if held is not None and not held.startswith(actions.CHECK_REASON):
        # Ours would replace the admin's reason, and a later pass would then resume their node.
        return f"; left drained as it was ({held or 'no reason given'})"
    actions.scontrol(argv, SCONTROL_TIMEOUT_S)
    return "; drained"


def _resume(options: CheckOptions) -> str:
    argv = actions.resume_command(options.node)
    if options.dry_run:
        print(f"would run, if Slurm holds it drained by a check: {shlex.join(argv)}", flush=True)
        return ""
    held = actions.drain_reason(options.node, SCONTROL_TIMEOUT_S)
    if held is None:
        return ""
    if not held.startswith(actions.CHECK_REASON):
        return f"; stays drained, for another reason than a check's ({held or 'no reason given'})"
    actions.scontrol(argv, SCONTROL_TIMEOUT_S)
    return "; resumed: a check had drained it"


def record_of(options: CheckOptions, outcome: Outcome, started_utc: str) -> RunRecord:
    """The check as the results store keeps it: each device's figures under this node, and its verdict."""
    judged = outcome.reason is None or outcome.proof  # a check that judged nothing leaves no verdict
    verdict = ("PASS" if outcome.reason is None else "FAIL") if judged else None
    klass = outcome.klass or "?"
    figures = [Figure(options.node, device, f"check.{metric}", value, klass)
               for (device, metric), value in sorted(outcome.figures.items())]
    return RunRecord(uuid.uuid4().hex, "check", started_utc, utc_stamp(), "complete" if judged else "failed",
                     verdict, socket.gethostname(), None, figures, {options.node: verdict} if judged else {},
                     outcome.reason,
                     {options.node: klass} if outcome.klass else {})


COMMAND = ToolCommand(
    "check", "this node's health check within a time budget, for Slurm's HealthCheckProgram, Prolog or Epilog",
    add_arguments, run,
)
