"""What a command that only reads run folders costs to start: against a bare Python and an `import torch`.

`compare`, `report`, `diagnose`, `baseline`, `align` and `model` never load torch (docs/architecture.md),
so on a busy login node or in a CI step they cost what their own work costs. Rounds alternate the
commands; the median wall time of each is printed, and the ratio of `compare` to `import torch`.

    python bench/bench_startup.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from report_fixtures import gpu_run_doc, write_run  # the tests' synthetic run folders


def _seconds(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        runs = [str(write_run(Path(tmp) / name, gpu_run_doc({"hostname": name}))) for name in ("a", "b")]
        commands = {
            "python -c pass": [py, "-c", "pass"],
            "python -c 'import torch'": [py, "-c", "import torch"],
            "clusterbench --help": [py, "-m", "clusterbench", "--help"],
            "clusterbench compare A B": [py, "-m", "clusterbench", "compare", *runs],
            "clusterbench model predict": [py, "-m", "clusterbench", "model", "predict", "--intra", "nvlink4",
                                           "--inter", "ndr", "--nodes", "16", "--gpus-per-node", "8"],
            "clusterbench report A": [py, "-m", "clusterbench", "report", runs[0]],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for name, argv in commands.items():  # warm the file cache once
            _seconds(argv)
        for _ in range(a.rounds):
            for name, argv in commands.items():
                times[name].append(_seconds(argv))
    print(f"median wall seconds of {a.rounds} alternating rounds")
    for name, ts in times.items():
        print(f"  {name:<28} {statistics.median(ts):6.3f}")
    ratio = statistics.median(times["clusterbench compare A B"]) / statistics.median(times["python -c 'import torch'"])
    print(f"compare / import torch: {ratio:.2f}")


if __name__ == "__main__":
    main()
