"""How long `clusterbench fleet` takes on N namespace nodes of this machine, where the time goes, and
what that projects to for 128 and 1,024 nodes. Needs root (network namespaces).

    sudo python bench/bench_fleet.py [--nodes 4 6 8] [--project 128 1024]

Each size is a fresh set of namespace nodes (tests/beds.py), each with its own host name, running
the real command with its defaults (numerics vote included) and `--iface eth0`. It reports the
wall time from launch to the last rank's exit, rank 0's phases (run.json's fleet.seconds), rank 0's
peak memory (VmHWM) and the bytes the fleet's objects take pickled, as they travel to rank 0.
The projection keeps what is per node (the node-local phase runs on every node at once, so its
time stays; rank 0 gathers one probe per node) and scales what is per pair, for the default plan of
pairs (stages/fleet/coverage.py: every pair up to 128 nodes, sampled beyond): its rounds at the measured time of
a round, and the figures rank 0 receives at each round's end. bench_fleet_scale.py drives rank 0's own
code at thousands of nodes.
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path

# The namespace nodes and the launch of their ranks are the tests' own beds.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from beds import netns_cluster
from conftest import finish, start_nodes

from clusterbench.results import codec
from clusterbench.stages.comm.records import PAIRS
from clusterbench.stages.fleet import coverage
from clusterbench.stages.fleet.options import PARTNERS
from clusterbench.stages.fleet.records import NodeProbe
from clusterbench.stages.registry import load_run


def _peak_kib(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)


def one(nodes: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp, netns_cluster(nodes) as bed:
        out = Path(tmp) / "run"
        start = time.monotonic()
        procs = start_nodes(nodes, ["fleet", "--iface", "eth0", "--out", str(out)], master=bed.addr(0), port=29500,
                            popen=bed.popen)
        peak = 0
        while procs[0].poll() is None:  # rank 0 is one process from `ip netns exec` to python: they exec
            peak = max(peak, _peak_kib(procs[0].pid))
            time.sleep(0.05)
        done = finish(procs)
        wall = time.monotonic() - start
        run = json.loads((out / "run.json").read_text())
        fleet = run["fleet"]
        probes = [codec.load(NodeProbe, p) for p in fleet["probes"]]
        pairs = PAIRS.of(load_run(out))
        csv_bytes = (out / "pairs.csv").stat().st_size
    return {
        "nodes": nodes, "exit": done[0].returncode, "wall_s": wall, "phases_s": fleet["seconds"],
        "rounds": fleet["coverage"]["rounds"], "excluded": [e["node"] for e in fleet["excluded"]],
        "rank0_peak_mib": peak / 1024, "probe_bytes": statistics.median(len(pickle.dumps(p)) for p in probes),
        "csv_bytes_per_row": csv_bytes / max(1, len(pairs)),
    }


def project(measured: dict, n: int) -> dict:
    """n nodes with the default plan of pairs: every pair up to ALL_UP_TO nodes, sampled beyond."""
    per_round = measured["phases_s"]["pairwise"] / measured["rounds"]
    cover = coverage.plan(n, "auto", PARTNERS, 0)[1]
    rows = 2 * cover.pairs
    return {
        "nodes": n, "rounds": cover.rounds, "mode": cover.mode,
        "time_s": (measured["phases_s"]["node-local"] + measured["phases_s"].get("rechecks", 0)
                   + cover.rounds * per_round),
        # Each receiver's figures reach rank 0 as three float64s a direction.
        "gathered_at_rank0_mb": (n * measured["probe_bytes"] + rows * 24) / 1e6,
        "pairs_csv_mb": rows * measured["csv_bytes_per_row"] / 1e6,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, nargs="+", default=[4, 6, 8])
    p.add_argument("--project", type=int, nargs="+", default=[128, 1024])
    args = p.parse_args()
    found = [one(n) for n in args.nodes]
    for m in found:
        phases = ", ".join(f"{k} {v:.1f} s" for k, v in m["phases_s"].items())
        print(f"{m['nodes']} nodes: {m['wall_s']:.1f} s wall (exit {m['exit']}, excluded {m['excluded'] or 'none'}); "
              f"{phases}; rank 0 peak {m['rank0_peak_mib']:.0f} MiB; a node's probe {m['probe_bytes']:.0f} B pickled, "
              f"a pair row {m['csv_bytes_per_row']:.0f} B in pairs.csv")
    largest = found[-1]
    for n in args.project:
        q = project(largest, n)
        print(f"projected {n} nodes (from {largest['nodes']}): {q['rounds']} rounds ({q['mode']} pairs), "
              f"{q['time_s'] / 60:.1f} min of measuring, {q['gathered_at_rank0_mb']:.1f} MB gathered at rank 0, "
              f"pairs.csv {q['pairs_csv_mb']:.0f} MB")


if __name__ == "__main__":
    main()
