"""How long `clusterbench comm --pattern pairwise` takes, and what that means for a large fleet.

    python bench/bench_pairwise.py [--nproc 4 8] [--max-bytes 4M]

For each world size it runs the real command, reads the time the rounds took from its output
(n-1 rounds for even n), and projects a fleet: rounds x the time of one round. The time of one
round is measured here, so the projection is for a fleet whose pairs move data as fast as
these ranks do; it also prints the same projection with the round time scaled to a given
link rate (`--fleet-gbps`), since a round is mostly its two message streams.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clusterbench.argtypes import size
from clusterbench.results import codec
from clusterbench.stages.comm.pairwise import BW_ITERS
from clusterbench.stages.comm.records import PAIRS
from clusterbench.stages.comm.schedule import rounds
from clusterbench.stages.registry import load_run


def one(nproc: int, max_bytes: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "clusterbench", "comm", "--nproc", str(nproc), "--pattern",
                               "pairwise", "-e", str(max_bytes), "--out", f"{tmp}/run"],
                              capture_output=True, text=True, check=True)
        wall = time.monotonic() - start
        pairs = [codec.dump(p) for p in PAIRS.of(load_run(Path(tmp) / "run"))]
    done = [float(s) for s in re.findall(r"# round \d+/\d+ done after ([\d.]+) s", proc.stdout)]
    median_gbps = sorted(p["gbps"] for p in pairs)[len(pairs) // 2]
    return {"nproc": nproc, "rounds": len(done), "rounds_s": done[-1], "per_round_s": done[-1] / len(done),
            "wall_s": wall, "median_gbps": median_gbps}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, nargs="+", default=[4, 8])
    p.add_argument("--max-bytes", type=size, default=4 * 1024**2)
    p.add_argument("--fleet", type=int, nargs=2, default=[128, 8], metavar=("NODES", "GPUS"))
    p.add_argument("--fleet-bytes", type=size, default=256 * 1024**2, help="the message a GPU fleet uses")
    p.add_argument("--fleet-gbps", type=float, default=400.0, help="one pair's link rate in the fleet")
    a = p.parse_args()
    nodes, gpus = a.fleet
    print(f"{'ranks':>6} {'rounds':>7} {'rounds s':>9} {'per round s':>12} {'wall s':>7} {'median Gbps':>12}")
    for n in a.nproc:
        r = one(n, a.max_bytes)
        print(f"{r['nproc']:>6} {r['rounds']:>7} {r['rounds_s']:>9.2f} {r['per_round_s']:>12.3f} {r['wall_s']:>7.1f} "
              f"{r['median_gbps']:>12.2f}")
    for label, players in (("every rank", nodes * gpus), ("--nodes-only", nodes)):
        n_rounds = len(rounds(players))
        here = n_rounds * r["per_round_s"]
        # Two directions, each a warm-up and BW_ITERS messages, at the fleet's link rate.
        streams = 2 * (BW_ITERS + 1) * a.fleet_bytes * 8 / (a.fleet_gbps * 1e9)
        print(f"# {nodes} nodes x {gpus} GPUs, {label}: {n_rounds} rounds; at this machine's round time "
              f"{here / 60:.1f} min; at {a.fleet_gbps:g} Gbps with {a.fleet_bytes >> 20} MiB messages "
              f">= {n_rounds * streams / 60:.1f} min of streams")


if __name__ == "__main__":
    main()
