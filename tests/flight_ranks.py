"""A real Gloo job that hangs, for tests/test_flight.py and the dumps of tests/data/flight/.

    python tests/flight_ranks.py MODE FOLDER [--world N] [--torch-bytes | --json]

Three ranks (--world) run three all_reduces of 256 float32 with the Flight Recorder on
(flight/record.py's environment, set before torch is imported), then MODE: "skip", the last rank
skips the fourth all_reduce the others block in; "mismatch", the last rank calls all_gather where
the others call all_reduce; "healthy", every rank runs the fourth, and ranks 0-1 a broadcast in a
group of their own. A thread dumps each rank's record into FOLDER once the rank's last op is
recorded, while the others still wait, and ends the rank once every rank has dumped. By default a rank writes
record.dump's file (torch's pickle plus rank and host); with --torch-bytes torch's own pickle
unchanged, with --json torch's JSON dump, as the fixtures keep them.

The ranks are forked from this process after it imported torch once (three imports side by side
cost a loaded CI runner seconds each); the recorder reads its variables when first used, in the ranks.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pickle
import socket
import threading
import time
from pathlib import Path

from clusterbench.flight import record

os.environ.update(record.environment(environ={}))
import torch  # after the recorder's variables are set
import torch.distributed as dist


def _dump(args: argparse.Namespace, rank: int, expected: int) -> None:
    c10d = torch._C._distributed_c10d
    # Dump once this rank's own last op is recorded (enqueued; in "healthy", finished): on a loaded
    # runner its main thread may reach the op later than any fixed delay.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        entries = pickle.loads(c10d._dump_fr_trace(includeCollectives=True, includeStackTraces=False,
                                                   onlyActive=False))["entries"]
        if len(entries) >= expected and (args.mode != "healthy" or all(e["retired"] for e in entries)):
            break
        time.sleep(0.05)
    if args.json:
        (args.folder / f"{record.PREFIX}{rank}.json").write_bytes(
            c10d._dump_fr_trace_json(includeCollectives=True, onlyActive=False))
    elif args.torch_bytes:
        (args.folder / f"{record.PREFIX}{rank}").write_bytes(
            c10d._dump_fr_trace(includeCollectives=True, includeStackTraces=True, onlyActive=False))
    else:
        record.dump(rank, args.folder)
    # A rank that ends breaks the others' connections: each stays until every rank has dumped.
    deadline = time.monotonic() + 30
    while len(list(args.folder.glob(f"{record.PREFIX}*"))) < args.world and time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(0)  # the main thread is blocked in a collective that will never complete


def rank_main(args: argparse.Namespace, port: int, rank: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.world)
    pair = dist.new_group([0, 1], group_desc="pair") if args.mode == "healthy" else None
    tensor = torch.ones(256)
    for _ in range(3):
        dist.all_reduce(tensor)
    last = rank == args.world - 1
    expected = 3 if args.mode == "skip" and last else 5 if args.mode == "healthy" and rank < 2 else 4
    threading.Thread(target=_dump, args=(args, rank, expected), daemon=True).start()
    try:
        if args.mode == "mismatch" and last:
            dist.all_gather_into_tensor(torch.zeros(256 * args.world), tensor)
        elif args.mode != "skip" or not last:
            dist.all_reduce(tensor)
        if pair is not None and rank < 2:
            dist.broadcast(tensor, 0, group=pair)
    except RuntimeError:  # a peer that dumped and ended closed the connection: this rank's timer ends it
        pass
    time.sleep(60)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["skip", "mismatch", "healthy"])
    p.add_argument("folder", type=Path)
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--torch-bytes", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fork = multiprocessing.get_context("fork")
    ranks = [fork.Process(target=rank_main, args=(args, port, r)) for r in range(args.world)]
    for proc in ranks:
        proc.start()
    for proc in ranks:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
    return 0 if len(list(args.folder.glob(f"{record.PREFIX}*"))) == args.world else 1


if __name__ == "__main__":
    raise SystemExit(main())
