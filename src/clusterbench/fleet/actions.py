"""What a fleet's conclusion is acted on with: the exclude list, printed, written, and, under Slurm
with --drain, the condemned nodes drained with scontrol (docs/methodology.md §16). Nothing here is
done unless asked; --dry-run prints the scontrol commands instead of running them."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from clusterbench.errors import RunFailed, UsageError
from clusterbench.results.documents import write_text
from clusterbench.results.fleet import Exclusion
from clusterbench.results.folder import check_output, result_files

REASON_LIMIT = 200  # Slurm keeps a drain reason in a node's record: keep it to one readable line


def under_slurm() -> bool:
    return bool(os.environ.get("SLURM_JOB_ID"))


def check_drain(dry_run: bool) -> None:
    """--drain needs Slurm's scontrol where the command concludes, unless it only prints the commands."""
    if dry_run:
        return
    if not under_slurm():
        raise UsageError("--drain: this job is not running under Slurm (no SLURM_JOB_ID), and draining a node is "
                         "Slurm's; run it in an srun/sbatch job, or add --dry-run to print the commands")
    if shutil.which("scontrol") is None:
        raise UsageError("--drain: scontrol is not on PATH here; add --dry-run to print the commands")


def check_exclude_out(path: Path) -> Path:
    """An earlier exclude list may be replaced; a run's own file or a folder may not."""
    theirs = path.name == "run.json" or ((path.parent / "run.json").exists() and path in result_files(path.parent))
    return check_output(path, "--exclude-out", overwrite=not theirs)


def write_exclude_list(path: Path, excluded: list[Exclusion]) -> Path:
    """One node per line, as `srun --exclude=$(paste -sd, FILE)` and Slurm's own tools read it."""
    return write_text(path, "".join(f"{e.node}\n" for e in excluded), "--exclude-out")


def drain_commands(excluded: list[Exclusion]) -> list[list[str]]:
    return [["scontrol", "update", f"nodename={e.node}", "state=drain",
             f"reason=clusterbench: {'; '.join(e.reasons)}"[:REASON_LIMIT]] for e in excluded]


def drain(excluded: list[Exclusion], dry_run: bool) -> list[str]:
    """Drain each excluded node (or, with dry_run, only say how); the lines to print."""
    lines = []
    for argv in drain_commands(excluded):
        text = shlex.join(argv)
        if dry_run:
            lines.append(f"would run: {text}")
            continue
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        if proc.returncode != 0:
            why = (proc.stderr or proc.stdout).strip().splitlines()
            raise RunFailed(f"{text} failed (exit {proc.returncode}): {why[0] if why else 'no message'}")
        lines.append(f"drained: {argv[2].removeprefix('nodename=')}")
    return lines
