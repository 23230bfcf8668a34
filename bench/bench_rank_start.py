"""What starting local ranks costs: this tree against an earlier commit's, in CPU seconds and wall.

Local ranks fork from a process that imported torch and the command's heavy modules once: the
command's own process where its fork is clean (comm: no thread since torch's import), else a
forkserver (train: its process has tokenized and run torch ops, so it has thread pools); before,
each rank was a spawned interpreter that imported them itself (runtime/launch.py: _context). On a machine
that runs several jobs, or a CI runner, the CPU seconds are what the start-up takes from the
others. Each round runs a tiny comm and a tiny train command (2 ranks) of both trees,
alternating; the machine's CPU seconds come from /proc/stat around each command, so the
forkserver's and the ranks' time is counted wherever it runs. Run it on an otherwise idle machine.

    python bench/bench_rank_start.py --before f91cb75 [--rounds 3] [--nproc 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")


def _busy_ticks() -> int:
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4]  # all but idle and iowait


def _measure(argv: list[str], src: Path) -> tuple[float, float]:
    """(machine CPU seconds, wall seconds) of one command run with `src` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    busy, start = _busy_ticks(), time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (_busy_ticks() - busy) / TICKS, time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="the commit to compare with (its src/ on PYTHONPATH)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--nproc", type=int, default=2)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old), a.before], check=True,
                       capture_output=True)
        try:
            trees = {f"before ({a.before})": old / "src", "after": ROOT / "src"}
            cb = [sys.executable, "-m", "clusterbench"]
            out = ["--out", str(Path(tmp) / "run"), "--overwrite", "--nproc", str(a.nproc)]
            commands = {
                "comm all_reduce 8 B": [*cb, "comm", "--ops", "all_reduce", "-b", "8", "-e", "8", *out],
                "train 2 steps": [*cb, "train", "--steps", "2", "--warmup-steps", "1", "--seq-len", "32",
                                  "--global-batch", "4", "--peak-tflops", "1", *out],
            }
            found: dict[tuple[str, str], list[tuple[float, float]]] = {}
            for name, argv in commands.items():  # warm the file cache once
                for src in trees.values():
                    _measure(argv, src)
            for _ in range(a.rounds):
                for name, argv in commands.items():
                    for tree, src in trees.items():
                        found.setdefault((name, tree), []).append(_measure(argv, src))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=False)
    print(f"median of {a.rounds} alternating rounds, {a.nproc} ranks")
    for name in commands:
        cpu = {tree: statistics.median(c for c, _ in found[(name, tree)]) for tree in trees}
        wall = {tree: statistics.median(w for _, w in found[(name, tree)]) for tree in trees}
        before, after = list(trees)
        print(f"  {name:<20} CPU {cpu[before]:5.1f} s -> {cpu[after]:5.1f} s ({cpu[after] / cpu[before]:.2f}x), "
              f"wall {wall[before]:5.1f} s -> {wall[after]:5.1f} s ({wall[after] / wall[before]:.2f}x)")


if __name__ == "__main__":
    main()
