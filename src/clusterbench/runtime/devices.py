"""The local devices as torch sees them: how many, what each is called, waiting for one to finish."""

from __future__ import annotations

import torch

from clusterbench.hw.host import cpu


def local_device_count(device_type: str) -> int:
    if device_type == "cuda":
        return torch.cuda.device_count()
    module = getattr(torch, device_type, None)
    count = getattr(module, "device_count", None)
    return count() if device_type != "cpu" and callable(count) else 0


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        return cpu().model or "cpu"
    return str(device)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
