"""What the Flight Recorder costs a comm sweep: all_reduce of 1 KiB on Gloo ranks, with the recorder's
buffer on (flight/record.py's default size) and off (TORCH_FR_BUFFER_SIZE=0), in alternating jobs.

    python bench/bench_flight.py [--nproc 2] [--iters 2000] [--rounds 3] [--bytes 1024]

Each job is a fresh set of ranks (torch reads the variable once per process), forked from this
process after it imported torch, meeting over a free port on 127.0.0.1. A job times `iters`
blocking all_reduces after 50 warm-up calls; rank 0's wall time per call is kept, and its calling
thread's CPU time per call, which is where the recorder works (it captures the Python stack when the
op is enqueued) and which other load on the machine moves far less than the wall time. The
recorder's entry count is read back to prove the buffer was on or off. On and off alternate, the
order flipping each round, so drift and other load hit both alike; the medians are compared.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pickle
import socket
import statistics
import time

import torch
import torch.distributed as dist

from clusterbench.flight import record


def _rank(rank: int, world: int, port: int, buffer: int, iters: int, numel: int, out) -> None:
    # "off" is 0 set explicitly: torch 2.13 records 2,000 entries when the variable is unset.
    os.environ.update(record.environment(buffer=buffer, environ={}))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    t = torch.ones(numel)
    for _ in range(50):
        dist.all_reduce(t)
    dist.barrier()
    start, cpu = time.perf_counter(), time.thread_time()
    for _ in range(iters):
        dist.all_reduce(t)
    elapsed, cpu = time.perf_counter() - start, time.thread_time() - cpu
    if rank == 0:
        trace = pickle.loads(torch._C._distributed_c10d._dump_fr_trace(includeCollectives=True,
                                                                       includeStackTraces=False, onlyActive=False))
        out.put((elapsed / iters * 1e6, cpu / iters * 1e6, len(trace["entries"])))
    dist.destroy_process_group()


def job(world: int, buffer: int, iters: int, numel: int) -> tuple[float, float, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, world, port, buffer, iters, numel, out)) for r in range(world)]
    for p in procs:
        p.start()
    result = out.get(timeout=300)
    for p in procs:
        p.join(timeout=60)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bytes", type=int, default=1024)
    args = p.parse_args()
    wall: dict[str, list[float]] = {"on": [], "off": []}
    cpu: dict[str, list[float]] = {"on": [], "off": []}
    for r in range(args.rounds):
        for name in (("on", "off") if r % 2 == 0 else ("off", "on")):
            buffer = record.DEFAULT_BUFFER if name == "on" else 0
            us, cpu_us, entries = job(args.nproc, buffer, args.iters, args.bytes // 4)
            expected = min(buffer, args.iters + 51) if buffer else 0
            assert entries == expected, f"{name}: {entries} entries recorded, expected {expected}"
            wall[name].append(us)
            cpu[name].append(cpu_us)
            print(f"round {r} {name:>3}: {us:8.2f} us wall, {cpu_us:6.2f} us CPU per all_reduce "
                  f"({entries} entries kept)", flush=True)
    print(f"torch {torch.__version__}, {args.nproc} gloo ranks, all_reduce {args.bytes} B x {args.iters}, "
          f"buffer {record.DEFAULT_BUFFER}, {args.rounds} rounds, medians:")
    for what, figures in (("wall", wall), ("CPU of the calling thread", cpu)):
        on, off = statistics.median(figures["on"]), statistics.median(figures["off"])
        print(f"  {what}: {on:.2f} us on, {off:.2f} us off: {on - off:+.2f} us per call ({(on / off - 1) * 100:+.1f}%)")


if __name__ == "__main__":
    main()
