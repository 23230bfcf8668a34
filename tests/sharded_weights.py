"""Ranks that shard a model the way `train --parallel fsdp` does and hold its weights against models.build's.

    python tests/sharded_weights.py WORLD [--model-config FILE | --model-path DIR]

Each rank builds the model on meta (models.build_unfilled), shards it (loop.shard), fills its shards,
then gathers the full state dict; rank 0 prints one line per parameter or buffer whose value is not
bitwise that of models.build, then "checked N tensors" with the peak RSS of every rank. The ranks
are forked from this process after it imported torch once.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import socket

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from clusterbench.stages.train import models
from clusterbench.stages.train.loop import LoopConfig, shard

LOOP = LoopConfig(steps=1, warmup_steps=0, global_batch=1, micro_batch=1, lr=1e-3, lr_warmup_steps=0,
                  dtype="float32", parallel="fsdp", activation_checkpointing=False)


def _rank(rank: int, world: int, port: int, spec: models.ModelSpec) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    unfilled = models.build_unfilled(spec, 0)
    model = shard(unfilled.model, LOOP)
    unfilled.fill(model, torch.device("cpu"))
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    buffers = dict(model.named_buffers())
    peak = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20])
    peaks = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(peaks, peak)
    if rank == 0:
        expected = models.build(spec, 0)
        for name, value in {**dict(expected.named_parameters()), **dict(expected.named_buffers())}.items():
            got = full.get(name, buffers.get(name))
            if got is None or got.shape != value.shape or not torch.equal(got, value):
                print(f"differs: {name}")
        print(f"checked {len(full) + len(buffers)} tensors; {unfilled.how}; peak RSS GiB "
              + " ".join(f"{p.item():.2f}" for p in peaks), flush=True)
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("world", type=int)
    p.add_argument("--model-config")
    p.add_argument("--model-path")
    a = p.parse_args()
    spec = models.resolve(None if a.model_config or a.model_path else "tiny", a.model_config, a.model_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_rank, args=(r, a.world, port, spec)) for r in range(a.world)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
    os._exit(max(abs(proc.exitcode or 0) for proc in procs))


if __name__ == "__main__":
    main()
