"""What moving the buffers' offset every call changes on this machine: Duration with --rotate and --no-rotate.

    python bench/bench_rotation.py [--nproc 2] [--ops all_reduce,all_gather] [--min-bytes 4K] [--max-bytes 64M]
                                   [--rounds 5]

Same ranks, same sizes, `comm.sweep.measure` as the CLI calls it: "moved" lends it one arena of
--max-bytes, as the CLI's sweep does (the sweep's largest size), so call i of a size runs on the
i-th window of it (at most 1024 windows: the walk spans min(max bytes, 1024 x size)); "fixed" runs
every call on one buffer. Per op and size the two alternate, the order flipping each round, so
drift and other load hit both alike; each round gives a ratio moved / fixed of the two
Durations, and the median ratio over the rounds is printed with its middle half, beside the ratio
of the two least-disturbed rounds (the minima). `--budget` times each size longer than the CLI's
default, to see through a busy host. Where the walk
outgrows a cache the buffer fits in, "moved" reads it cold from the next level, as a training
step's gradients are, instead of warm from the previous call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from clusterbench.argtypes import size
from clusterbench.runtime import launch
from clusterbench.runtime.dist import resolve
from clusterbench.shape import JobShape
from clusterbench.stages.comm.ops import OPS
from clusterbench.stages.comm.plan import resolve as resolve_plan
from clusterbench.stages.comm.records import CommOptions
from clusterbench.stages.comm.rotation import MAX_WINDOWS, Arena
from clusterbench.stages.comm.scopes import whole_job
from clusterbench.stages.comm.sizes import count_for, geometric
from clusterbench.stages.comm.sweep import measure
from clusterbench.units import human_bytes


def compare(worker, cfg: dict, progress) -> None:
    arena = Arena(cfg["max_bytes"], worker.device)
    team = whole_job(list(worker.members))
    results = []
    for name in cfg["ops"]:
        op = OPS[name]
        opts = CommOptions(ops=(name,), time_budget_s=cfg["budget"])
        plan = resolve_plan(opts, frozenset(), JobShape(worker.world_size, worker.device.type, worker.backend, None))
        for nbytes in cfg["sizes"]:
            count = count_for(nbytes, 4, op.facts.granularity(worker.world_size))
            us: dict[str, list[float]] = {"fixed": [], "moved": []}
            for r in range(cfg["rounds"]):
                for mode in ("fixed", "moved") if r % 2 == 0 else ("moved", "fixed"):
                    row = measure(op, worker, plan, count, team, arena=arena if mode == "moved" else None)
                    us[mode].append(row.duration_us)
            results.append({"op": name, "bytes": count * 4, **us})
    if worker.is_main:
        Path(cfg["out"]).write_text(json.dumps(results))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--ops", default="all_reduce,all_gather")
    p.add_argument("--min-bytes", type=size, default=4 * 2**10)
    p.add_argument("--max-bytes", type=size, default=64 * 2**20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--budget", type=float, default=CommOptions().time_budget_s)
    a = p.parse_args()
    # The arena's largest size itself never moves (it fits once), so the sizes stop at half of it.
    sizes = geometric(a.min_bytes, a.max_bytes // 2, 4)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        cfg = {"ops": a.ops.split(","), "sizes": sizes, "max_bytes": a.max_bytes, "rounds": a.rounds,
               "budget": a.budget, "out": str(out)}
        launch.run(launch.Job(compare, cfg, resolve("auto", None, 300)), a.nproc)
        results = json.loads(out.read_text())
    print(f"float32, {a.nproc} ranks, arena {human_bytes(a.max_bytes)}, budget {a.budget:g} s, {a.rounds} "
          f"alternating rounds: median Durations, the median of the rounds' ratios with its middle half, "
          f"and the ratio of the minima")
    print(f"{'op':<12} {'size':>10} {'walk':>10} {'fixed us':>10} {'moved us':>10} {'moved / fixed':>14} "
          f"{'middle half':>14} {'of minima':>10}")
    ratios = []
    for r in results:
        walk = min(a.max_bytes // r["bytes"], MAX_WINDOWS) * r["bytes"]
        paired = sorted(m / f for m, f in zip(r["moved"], r["fixed"]))
        ratios.append(statistics.median(paired))
        q1, q3 = statistics.quantiles(paired, n=4)[::2] if len(paired) > 1 else (paired[0], paired[0])
        print(f"{r['op']:<12} {human_bytes(r['bytes']):>10} {human_bytes(walk):>10} "
              f"{statistics.median(r['fixed']):10.1f} {statistics.median(r['moved']):10.1f} "
              f"{ratios[-1]:14.3f} {q1:7.3f}-{q3:.3f} {min(r['moved']) / min(r['fixed']):10.3f}")
    print(f"median over the rows of the median ratio: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
