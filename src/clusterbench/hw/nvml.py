"""The one boundary to NVML: load it, call it, open and close a session.

Everything else in clusterbench.hw reaches NVML through these functions, so a test
replaces load() with a fake and the whole hardware picture follows from that fake.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def load() -> Any | None:
    """The pynvml module (package nvidia-ml-py), or None when it is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def call(nvml: Any, name: str, *args: Any) -> Any:
    """nvml.<name>(*args), or None when this pynvml, driver or GPU cannot answer.

    A None argument (a GPU NVML gave no handle for) answers None without asking.
    """
    fn = getattr(nvml, name, None)
    if fn is None or any(arg is None for arg in args):
        return None
    try:
        return fn(*args)
    except nvml.NVMLError:
        return None


@contextmanager
def session() -> Iterator[tuple[Any | None, str]]:
    """Yield (nvml, "") with NVML started, or (None, why not)."""
    nvml = load()
    if nvml is None:
        yield None, "nvidia-ml-py is not installed"
        return
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        yield None, f"NVML could not start: {exc}"
        return
    try:
        yield nvml, ""
    finally:
        call(nvml, "nvmlShutdown")


def text(value: Any) -> str | None:
    """NVML strings arrive as bytes from older pynvml releases and str from newer ones."""
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def handle_of(nvml: Any, uuid: str) -> Any:
    """The NVML handle of the GPU torch calls `uuid`, or None."""
    return call(nvml, "nvmlDeviceGetHandleByUUID", f"GPU-{uuid_key(uuid)}")


def uuid_key(uuid: str | None) -> str:
    # NVML says "GPU-<uuid>", torch says "<uuid>".
    return (uuid or "").lower().removeprefix("gpu-")


def bus_key(bus_id: str) -> str:
    """NVML's "00000000:18:00.0" as sysfs spells it, "0000:18:00.0", so ids compare."""
    match = re.fullmatch(r"([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-7])", bus_id.strip())
    if not match:
        return bus_id.strip().lower()
    domain, bus, device, function = match.groups()
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function}"
