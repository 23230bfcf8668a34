"""clusterbench's comm sweep against PARAM's comms benchmark, side by side: wall time and run-to-run spread.

    git clone https://github.com/facebookresearch/param /tmp/param    # PARAM, as published: never copied here
    python bench/bench_vs_param.py --param /tmp/param [--rounds 3] [--nproc 2]
    python bench/bench_vs_param.py --param /tmp/param --variant "" --variant=--no-rotate

Both tools sweep the same ops (default all_reduce, all_gather, reduce_scatter, all_to_all,
broadcast) over the same sizes (8 B..64 MiB, x2: 24 each, 120 rows) on the same number of gloo
ranks, each with its own defaults otherwise: `clusterbench comm --nproc N` and PARAM's
`train/comms/pt/comms.py` under `torch.distributed.run --standalone` (imported from the checkout
as the `param_bench` package its imports name, through a symbolic link in a temporary folder).
The tools alternate (ours, PARAM, ours, PARAM, ...), so whatever else loads the machine loads both
alike. Wall time is from starting the command to its exit: start-up, sweep and results. Each
size's Duration is clusterbench's mean (run.json `duration_us`) and PARAM's p50 over ranks of the
time per call; its spread over the rounds is (max - min) / median. `--variant ARGS` (repeatable)
adds clusterbench runs with extra options, each its own column; `--json FILE` keeps every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
PARAM_SCRIPT = Path("train/comms/pt/comms.py")
ATTEMPTS = 3
# PARAM's result lines: COMMS-RES-<op>-<dtype>, total size (B), elements per rank, then p50 of the time (us).
PARAM_ROW = re.compile(r"COMMS-RES-(?P<op>\w+?)-float32\s+(?P<size>\d+)\s+\d+\s+(?P<p50>[\d.]+)\s")

Durations = dict[tuple[str, int], float]  # (op, size in bytes) -> microseconds


def run_ours(nproc: int, ops: tuple[str, ...], max_bytes: str, extra: list[str]) -> tuple[float, Durations]:
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "clusterbench", "comm", "--nproc", str(nproc), "--ops", ",".join(ops),
                "-b", "8", "-e", max_bytes, "--out", tmp, *extra]
        seconds = _timed(argv, os.environ)
        rows = json.loads((Path(tmp) / "run.json").read_text())["comm"]
    return seconds, {(r["op"], r["size_bytes"]): r["duration_us"] for r in rows}


def run_param(checkout: Path, nproc: int, ops: tuple[str, ...], max_bytes: str) -> tuple[float, Durations]:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "param_bench").symlink_to(checkout.resolve())
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tmp, os.environ.get("PYTHONPATH")]))}
        # Long option names: torch.distributed.run would take PARAM's --b and --e as abbreviations of its own.
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
                str(checkout / PARAM_SCRIPT), "--begin-size", "8", "--end-size", max_bytes,
                "--collective", ",".join(ops), "--backend", "gloo", "--device", "cpu"]
        for attempt in range(1, ATTEMPTS + 1):
            t0 = time.perf_counter()
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            seconds = time.perf_counter() - t0
            if proc.returncode == 0:
                break
            # Seen on a loaded 2-core VM: a gloo timeout inside PARAM. Its time is not counted; the run is retried.
            why = [line for line in proc.stderr.splitlines() if "Error" in line][-1:] or proc.stderr.splitlines()[-1:]
            print(f"PARAM failed (exit {proc.returncode}, attempt {attempt} of {ATTEMPTS}): {why}", file=sys.stderr)
        else:
            sys.exit("PARAM failed every attempt")
    found = {(m["op"], int(m["size"])): float(m["p50"]) for m in PARAM_ROW.finditer(proc.stdout)}
    return seconds, found


def _timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"{shlex.join(argv[1:5])} failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    return time.perf_counter() - t0


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--param", type=Path, required=True, help="a checkout of github.com/facebookresearch/param")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--max-bytes", default="64M")
    p.add_argument("--variant", action="append", default=None,
                   help="extra clusterbench options, one run per round for each (default: one, with none)")
    p.add_argument("--json", type=Path, help="write every wall time and Duration here")
    a = p.parse_args()
    if not (a.param / PARAM_SCRIPT).is_file():
        sys.exit(f"--param {a.param}: no {PARAM_SCRIPT} there; git clone https://github.com/facebookresearch/param")
    ops = tuple(a.ops.split(","))
    variants = a.variant if a.variant is not None else [""]
    tools = [f"clusterbench {v}".strip() for v in variants] + ["PARAM"]
    walls: dict[str, list[float]] = {t: [] for t in tools}
    durations: dict[str, list[Durations]] = {t: [] for t in tools}
    for r in range(a.rounds):
        for tool, extra in zip(tools, [*variants, None]):
            if extra is None:
                seconds, found = run_param(a.param, a.nproc, ops, a.max_bytes)
            else:
                seconds, found = run_ours(a.nproc, ops, a.max_bytes, shlex.split(extra))
            walls[tool].append(seconds)
            durations[tool].append(found)
            print(f"round {r + 1}: {tool}: {seconds:.1f} s, {len(found)} rows", file=sys.stderr, flush=True)
    report(tools, walls, durations, a.nproc, a.rounds)
    if a.json:
        a.json.write_text(json.dumps({t: {"wall_s": walls[t], "durations_us": [
            [[op, size, us] for (op, size), us in sorted(d.items())] for d in durations[t]]} for t in tools}))


def report(tools: list[str], walls: dict[str, list[float]], durations: dict[str, list[Durations]],
           nproc: int, rounds: int) -> None:
    keys = sorted(set.intersection(*(set(d) for t in tools for d in durations[t])), key=lambda k: (k[0], k[1]))
    spreads = {t: {k: spread([d[k] for d in durations[t]]) for k in keys} for t in tools}
    param = walls["PARAM"]
    print(f"{len(keys)} rows per run, {nproc} gloo ranks, {rounds} interleaved rounds")
    print(f"{'tool':<40} {'wall s median':>13} {'min':>7} {'max':>7} {'/ PARAM':>8} "
          f"{'spread median':>14} {'p90':>6} {'max':>6} {'sizes <= PARAM':>15}")
    for t in tools:
        s = list(spreads[t].values())
        no_worse = sum(spreads[t][k] <= spreads["PARAM"][k] for k in keys)
        print(f"{t:<40} {statistics.median(walls[t]):13.1f} {min(walls[t]):7.1f} {max(walls[t]):7.1f} "
              f"{statistics.median(walls[t]) / statistics.median(param):8.2f} {statistics.median(s):14.3f} "
              f"{quantile(s, 0.9):6.3f} {max(s):6.3f} {no_worse:>9}/{len(keys)}")
    print("\nper op and size: median Duration (us) over the rounds and its spread, (max - min) / median")
    print(f"{'op':<15} {'size':>10} " + " ".join(f"{t[:24]:>24} {'spread':>6}" for t in tools))
    for k in keys:
        cells = " ".join(f"{statistics.median(d[k] for d in durations[t]):24.1f} {spreads[t][k]:6.3f}" for t in tools)
        print(f"{k[0]:<15} {k[1]:>10} {cells}")


if __name__ == "__main__":
    main()
