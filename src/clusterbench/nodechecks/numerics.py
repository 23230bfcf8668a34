"""The numerics task of the silent-data-corruption vote: every device trains the same tiny model,
from the same seed, on the same rows, alone; devices that compute alike give the same losses bit
for bit, so one that drifts is outvoted by the others of its class (docs/methodology.md §16)."""

from __future__ import annotations

import torch

from clusterbench import faults
from clusterbench.runtime.devices import synchronize
from clusterbench.stages.train import models
from clusterbench.stages.train.data import load_task
from clusterbench.stages.train.loop import ADAM_BETAS, sum_loss

SEED = 1234
SEQ_LEN = 64
ROWS = 4  # per step: enough to make every layer's gradient depend on several rows
LR = 1e-3


def losses(device: torch.device, rank: int, steps: int) -> list[float]:
    """This device's loss of each step of the task, as exact floats."""
    # One thread: a float32 reduction split over a different number of threads adds in a different order,
    # which would make healthy devices of one class disagree.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(device, rank, steps)
    finally:
        torch.set_num_threads(threads)


def _train(device: torch.device, rank: int, steps: int) -> list[float]:
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        model = models.build(models.resolve("tiny", None, None), SEED).to(device)
        task = load_task(seq_len=SEQ_LEN, seed=SEED)
        opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=ADAM_BETAS, weight_decay=0.0)
        found = []
        for step in range(1, steps + 1):
            batch = task.batch(step - 1, ROWS)
            mask = None if batch.real_tokens == batch.input_ids.numel() else batch.attention_mask.to(device)
            loss = sum_loss(model, batch.input_ids.to(device), batch.labels.to(device), mask)
            loss = loss / max(1, batch.loss_tokens) * faults.drift(rank, step)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            synchronize(device)
            found.append(float(loss.detach().cpu()))
        return found
    finally:
        torch.use_deterministic_algorithms(deterministic)
