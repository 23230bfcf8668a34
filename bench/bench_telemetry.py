"""Does the telemetry sampler move the measured figures? all_reduce busbw with it on and off, in one run.

    python bench/bench_telemetry.py [--nproc 2] [--hz 10] [--rounds 7] [--max-bytes 16M]

Same ranks, same sizes (1 MiB up, factor 2), `comm.sweep.measure` as the CLI times them. "on"
runs the sweep inside a stage of the real telemetry recorder (the sampler thread the CLI starts:
NVML on GPUs, /proc and /sys on CPUs from local rank 0, and the gather to rank 0 at the stage's
end, outside the timed calls); "off" runs it without one. The two alternate every round, the
order flipping each round, so drift and other load hit both alike; per size the medians over the
rounds are compared. Also printed: what one reading costs the sampler thread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from clusterbench.argtypes import size
from clusterbench.runtime import launch
from clusterbench.runtime.dist import resolve
from clusterbench.shape import JobShape
from clusterbench.stages.comm.ops import OPS
from clusterbench.stages.comm.plan import resolve as resolve_plan
from clusterbench.stages.comm.records import CommOptions
from clusterbench.stages.comm.scopes import whole_job
from clusterbench.stages.comm.sizes import geometric
from clusterbench.stages.comm.sweep import measure
from clusterbench.stages.registry import run_folder
from clusterbench.telemetry import recorder as telemetry
from clusterbench.telemetry.sampler import DEFAULT_HZ
from clusterbench.units import human_bytes


def _sweep(worker, sizes: list[int], budget: float) -> list[float]:
    opts = CommOptions(ops=("all_reduce",), time_budget_s=budget)
    plan = resolve_plan(opts, frozenset(), JobShape(worker.world_size, worker.device.type, worker.backend, None))
    team = whole_job(list(worker.members))
    return [measure(OPS["all_reduce"], worker, plan, n // 4, team).busbw_gbps for n in sizes]


def compare(worker, cfg: dict, progress) -> None:
    # Rank 0 records into a run folder as the CLI does: telemetry.csv and run.json at each stage's end.
    folder = run_folder(Path(cfg["out"]).parent / "run").begin("bench", []) if worker.is_main else None
    busbw: dict[str, list[list[float]]] = {"on": [], "off": []}
    samples = 0
    for r in range(cfg["rounds"]):
        for mode in ("on", "off") if r % 2 == 0 else ("off", "on"):
            if mode == "off":
                busbw[mode].append(_sweep(worker, cfg["sizes"], cfg["budget"]))
                continue
            recorder = telemetry.start(worker, folder, cfg["hz"])
            with recorder.stage("bench"):
                busbw[mode].append(_sweep(worker, cfg["sizes"], cfg["budget"]))
            recorder.close()
            if recorder.telemetry is not None:
                samples += sum(d.samples for d in recorder.telemetry.devices)
    recorder = telemetry.start(worker, None, cfg["hz"])
    cost = _read_cost(recorder)
    recorder.close()
    if worker.is_main:
        Path(cfg["out"]).write_text(json.dumps({"busbw": busbw, "samples": samples, "read_us": cost}))


def _read_cost(recorder: telemetry.Recorder) -> float | None:
    """Microseconds one probe reading takes (the sampler's whole work per tick)."""
    if recorder.sampler is None:
        return None
    probe = recorder.sampler.probe
    t0 = time.perf_counter()
    for _ in range(200):
        probe.read()
    return (time.perf_counter() - t0) / 200 * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--hz", type=float, default=DEFAULT_HZ)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--min-bytes", type=size, default=2**20)
    p.add_argument("--max-bytes", type=size, default=16 * 2**20)
    p.add_argument("--budget", type=float, default=0.25, help="seconds per size, as the CLI's default")
    a = p.parse_args()
    sizes = geometric(a.min_bytes, a.max_bytes, 2)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        cfg = {"sizes": sizes, "rounds": a.rounds, "budget": a.budget, "hz": a.hz, "out": str(out)}
        launch.run(launch.Job(compare, cfg, resolve("auto", None, 300)), a.nproc)
        found = json.loads(out.read_text())
    on, off = found["busbw"]["on"], found["busbw"]["off"]
    print(f"all_reduce float32, {a.nproc} ranks, sampler at {a.hz:g} Hz on vs off, median of {a.rounds} "
          f"alternating rounds; {found['samples']} samples taken while on")
    if found["read_us"] is not None:
        share = found["read_us"] * 1e-6 * a.hz
        print(f"one reading: {found['read_us']:.0f} us, so the sampler thread is busy {share:.3%} of the time")
    print(f"{'size':>10} {'off busbw Gbps':>15} {'on busbw Gbps':>15} {'on / off':>9}")
    ratios = []
    for i, n in enumerate(sizes):
        b_off = statistics.median(r[i] for r in off)
        b_on = statistics.median(r[i] for r in on)
        ratios.append(b_on / b_off)
        print(f"{human_bytes(n):>10} {b_off:15.3f} {b_on:15.3f} {ratios[-1]:9.3f}")
    print(f"busbw on / off: median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}")


if __name__ == "__main__":
    main()
