"""The one boundary to NVML: load it, call it, open and close a session.

Everything else in clusterbench.hw reaches NVML through these functions, so a test
replaces load() with a fake and the whole hardware picture follows from that fake.
"""

from __future__ import annotations

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
