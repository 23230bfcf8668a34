"""Does the burn-in load the device as hard as a bare loop? Its matmul TFLOP/s during a soak against a bare
torch.mm loop of the same size and dtype, and its memory test's GB/s against a bare copy of the same region,
measured side by side in one run (issue 32's target: matmul >= 0.97 of the bare loop).

    python bench/bench_burnin.py [--seconds 20] [--rounds 3]

Each round runs the bare loops in one process, then `clusterbench burnin --nproc 1` for --seconds, and reads the
soak's own figures from its run folder (the median over its windows, from burnin.csv). The bare copy moves the region once and
back (written and read, the convention the memory test counts), so the two GB/s are of the same bytes.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BARE = r"""
import json, sys, time, torch
from clusterbench.stages.burnin import matmul, memory
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
seconds, region = float(sys.argv[1]), int(sys.argv[2])
sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
dtype, n = matmul.shape(device)
a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
out = torch.empty(n, n, device=device, dtype=dtype)
torch.mm(a, b, out=out); sync()
calls, start = 0, time.perf_counter()
while time.perf_counter() - start < seconds:
    for _ in range(8):
        torch.mm(a, b, out=out)
    sync(); calls += 8
tflops = 2 * n**3 * calls / (time.perf_counter() - start) / 1e12
src = torch.zeros(region // 8, dtype=torch.int64, device=device)
dst = torch.empty_like(src)
dst.copy_(src); sync()
moved, start = 0, time.perf_counter()
while time.perf_counter() - start < seconds:
    dst.copy_(src); sync(); moved += 2 * region
print(json.dumps({"tflops": tflops, "copy_gbps": moved / (time.perf_counter() - start) / 1e9}))
"""


def soak(seconds: float, window: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        proc = subprocess.run([sys.executable, "-m", "clusterbench", "burnin", "--nproc", "1", "--duration",
                               f"{seconds:g}", "--window", f"{window:g}", "--out", str(out)],
                              capture_output=True, text=True, timeout=seconds * 3 + 120, check=False)
        if proc.returncode != 0:
            sys.exit(f"burnin failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
        section = json.loads((out / "run.json").read_text())["extra"]["burnin"]
        with open(out / "burnin.csv") as f:  # every window (run.json thins a long soak's)
            rows = list(csv.DictReader(f))
        return {"tflops": statistics.median(float(r["matmul_tflops"]) for r in rows),
                "memory_gbps": statistics.median(float(r["memory_gbps"]) for r in rows),
                "region": section["memory_bytes"], "windows": len(rows)}


def bare(seconds: float, region: int) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", BARE, f"{seconds:g}", str(region)], capture_output=True, text=True,
                          timeout=seconds * 3 + 120, check=True)
    return json.loads(proc.stdout)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=20.0, help="each soak's duration, and each bare loop's")
    p.add_argument("--window", type=float, default=2.0)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    rows = []
    for r in range(1, args.rounds + 1):
        began = time.monotonic()
        s = soak(args.seconds, args.window)
        b = bare(args.seconds / 2, s["region"])
        rows.append((s, b))
        print(f"round {r}: soak matmul {s['tflops']:.4g} TFLOP/s, bare {b['tflops']:.4g} "
              f"({s['tflops'] / b['tflops']:.3f}x); memory test {s['memory_gbps']:.4g} GB/s, bare copy "
              f"{b['copy_gbps']:.4g} ({s['memory_gbps'] / b['copy_gbps']:.3f}x); {s['windows']} windows, region "
              f"{s['region'] / 2**20:.0f} MiB, {time.monotonic() - began:.0f} s", flush=True)
    matmul = statistics.median(s["tflops"] / b["tflops"] for s, b in rows)
    copy = statistics.median(s["memory_gbps"] / b["copy_gbps"] for s, b in rows)
    print(f"median of {args.rounds} rounds: matmul {matmul:.3f}x the bare loop (target >= 0.97), memory test "
          f"{copy:.3f}x a bare copy of the same region")


if __name__ == "__main__":
    main()
