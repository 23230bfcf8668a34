"""What the nodes of a fleet must agree on, as text per fact: read from the hardware picture and,
where the picture does not hold it, from the kernel and NVML (docs/methodology.md §16).

A fact this node cannot read is left out, never guessed: only facts that were read are compared.
"""

from __future__ import annotations

import platform
from collections import Counter
from pathlib import Path

from clusterbench.hw.host import read
from clusterbench.hw.nvml import call, handle_of, session
from clusterbench.stages.hardware.records import Hardware

# NVML's answers per GPU, each read as on or off where the call gives a (current, pending) pair.
_GPU_MODES = {"ecc": "nvmlDeviceGetEccMode", "mig": "nvmlDeviceGetMigMode",
              "persistence": "nvmlDeviceGetPersistenceMode"}


def node_facts(info: Hardware) -> dict[str, str]:
    """This node's facts: from its picture `info`, its kernel, and NVML for its GPUs."""
    facts = {
        "kernel": platform.release(),
        "cpu": info.cpu.model,
        "cpu cores": _text(info.cpu.logical_cores),
        "numa nodes": _text(len(info.numa_nodes) or None),
        "gpus": str(len(info.gpus)),
        "gpu model": _one(g.name for g in info.gpus),
        "pcie": _one(f"gen{g.pcie.gen_max} x{g.pcie.width_max}" for g in info.gpus if g.pcie.gen_max),
        "nvlinks per gpu": _one(str(g.nvlink_active) for g in info.gpus),
        "nics": str(sum(not n.virtual for n in info.net)) if info.net else None,
        "nic speed": _one(f"{n.speed_mbps} Mb/s" for n in info.net if not n.virtual and n.speed_mbps),
        "rdma ports": str(len(info.rdma)) if info.rdma else None,
        "rdma rate": _one(p.rate_text or "" for p in info.rdma),
        "rdma firmware": _one(_firmware(p.device) for p in info.rdma),
    }
    facts.update({name: version for name, version in info.versions.items() if name != "python"})
    facts.update(_gpu_modes(info))
    return {name: value for name, value in facts.items() if value}


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _one(values: object) -> str | None:
    """The value all of a node's devices share, or each value with its count where they differ: a
    node whose own GPUs disagree is an odd one itself."""
    counted = Counter(v for v in values if v)  # type: ignore[attr-defined]
    if not counted:
        return None
    if len(counted) == 1:
        return next(iter(counted))
    return ", ".join(f"{count} x {value}" for value, count in sorted(counted.items()))


def _firmware(device: str) -> str | None:
    return read(Path("/sys/class/infiniband") / device / "fw_ver")


def _gpu_modes(info: Hardware) -> dict[str, str | None]:
    if not info.gpus:
        return {}
    with session() as (nvml, _):
        if nvml is None:
            return {}
        handles = [handle_of(nvml, g.uuid or "") for g in info.gpus]
        modes = {name: _one(_on_off(call(nvml, call, h)) for h in handles)
                 for name, call in _GPU_MODES.items()}
        clocks = _one(_clocks(nvml, h) for h in handles)
    return {**modes, "application clocks": clocks}


def _on_off(answer: object) -> str | None:
    current = answer[0] if isinstance(answer, (tuple, list)) else answer
    return None if current is None else ("on" if current else "off")


def _clocks(nvml: object, handle: object) -> str | None:
    sm = call(nvml, "nvmlDeviceGetApplicationsClock", handle, getattr(nvml, "NVML_CLOCK_SM", 1))
    mem = call(nvml, "nvmlDeviceGetApplicationsClock", handle, getattr(nvml, "NVML_CLOCK_MEM", 2))
    return f"SM {sm} MHz, memory {mem} MHz" if sm and mem else None
