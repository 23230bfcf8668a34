"""What a fleet's conclusion is acted on with: the exclude list, printed, written, and, under Slurm
with --drain, the condemned nodes drained with scontrol (docs/methodology.md §16); and what a node's
health check does to its own node: drain it, or resume it where the check had drained it (§20).
Nothing here is done unless asked; --dry-run prints the scontrol commands instead of running them."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from clusterbench.errors import RunFailed, UsageError
from clusterbench.results.documents import write_text
from clusterbench.stages.fleet.records import Exclusion

REASON_LIMIT = 200  # Slurm keeps a drain reason in a node's record: keep it to one readable line
CHECK_REASON = "clusterbench check:"  # how a health check's drain reasons begin: the drains it may undo
SCONTROL_TIMEOUT_S = 60.0
# `scontrol show node -o` ends the reason with who set it and when: "Reason=text [root@2024-05-01T10:00:00]".
_SET_BY = re.compile(r"\s*\[[^\]]*@[^\]]*\]\s*$")


def under_slurm() -> bool:
    return bool(os.environ.get("SLURM_JOB_ID"))


def check_drain(dry_run: bool) -> None:
    """--drain needs Slurm's scontrol where the command concludes, unless it only prints the commands."""
    if dry_run:
        return
    if not under_slurm():
        raise UsageError("--drain: this job is not running under Slurm (no SLURM_JOB_ID), and draining a node is "
                         "Slurm's; run it in an srun/sbatch job, or add --dry-run to print the commands")
    check_scontrol("--drain")


def write_exclude_list(path: Path, excluded: list[Exclusion]) -> Path:
    """One node per line, as `srun --exclude=$(paste -sd, FILE)` and Slurm's own tools read it."""
    return write_text(path, "".join(f"{e.node}\n" for e in excluded), "--exclude-out")


def check_scontrol(flag: str) -> None:
    """Draining or resuming a node takes scontrol on PATH here."""
    if shutil.which("scontrol") is None:
        raise UsageError(f"{flag}: scontrol is not on PATH here; add --dry-run to print the commands")


def drain_command(node: str, reason: str) -> list[str]:
    return ["scontrol", "update", f"nodename={node}", "state=drain",
            f"reason={' '.join(reason.split())}"[:REASON_LIMIT]]


def resume_command(node: str) -> list[str]:
    return ["scontrol", "update", f"nodename={node}", "state=resume"]


def drain_commands(excluded: list[Exclusion]) -> list[list[str]]:
    return [drain_command(e.node, f"clusterbench: {'; '.join(e.reasons)}") for e in excluded]


def scontrol(argv: list[str], timeout: float = SCONTROL_TIMEOUT_S) -> str:
    """Run one scontrol command; what it printed, or RunFailed in one line."""
    text = shlex.join(argv)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise RunFailed(f"{text} did not answer within {timeout:g} s") from None
    except OSError as e:
        raise RunFailed(f"{text}: {e.strerror or e}") from None
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout).strip().splitlines()
        raise RunFailed(f"{text} failed (exit {proc.returncode}): {why[0] if why else 'no message'}")
    return proc.stdout


def drain_reason(node: str, timeout: float = SCONTROL_TIMEOUT_S) -> str | None:
    """Why Slurm holds `node` drained ("" where no reason was given), or None when it is not drained."""
    shown = scontrol(["scontrol", "show", "node", node, "-o"], timeout)
    state = re.search(r"(?:^|\s)State=(\S+)", shown)
    if state is None:
        raise RunFailed(f"scontrol show node {node} -o: no State= in what it printed")
    if "DRAIN" not in state.group(1).split("+"):
        return None
    # Reason= comes last, and its text may hold spaces and '='.
    _, _, reason = shown.partition(" Reason=")
    return _SET_BY.sub("", reason.strip())


def drain(excluded: list[Exclusion], dry_run: bool) -> list[str]:
    """Drain each excluded node (or, with dry_run, only say how); the lines to print."""
    lines = []
    for argv in drain_commands(excluded):
        if dry_run:
            lines.append(f"would run: {shlex.join(argv)}")
            continue
        scontrol(argv)
        lines.append(f"drained: {argv[2].removeprefix('nodename=')}")
    return lines
