"""Fresh weights built for a sharded model without ever holding the whole model on a rank.

The model is built with its parameters on the meta device while every write to them is recorded:
the op, the part of the parameter it wrote, its other arguments, and the CPU generator's state
just before it. Random ops are also run on a scratch CPU tensor of the same shape, one at a time,
so that the generator advances exactly as it does when the model is built on the CPU. Once the
model is sharded, each parameter is rebuilt alone on the CPU by replaying its writes from the
last one that overwrote it whole, each from its recorded generator state; the rank keeps its own
shard of it and drops the rest. The weights are therefore bitwise those of `models.build` (the
shipped reference curves were trained from them) at any world size, and the most a rank holds
beyond its shards is one parameter. docs/methodology.md §4 "Building a sharded model".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# Writes that replace every element without reading any: a parameter's writes before its last such
# write cannot change its value.
_OVERWRITES = {"normal_", "uniform_", "fill_", "zero_", "random_", "bernoulli_", "exponential_",
               "geometric_", "log_normal_", "cauchy_"}
_KEPT_LIMIT = 1 << 20  # elements: a constructor's value kept whole only below this


class NotReplayable(Exception):
    """The build wrote to a parameter in a way a replay cannot repeat alone."""


@dataclass
class _Write:
    op: Any  # an aten OpOverload
    view: tuple[tuple[int, ...], tuple[int, ...], int]  # size, stride, storage offset of the part written
    args: tuple[Any, ...]  # the other positional arguments (no tensor among them)
    kwargs: dict[str, Any]
    rng: torch.Tensor  # the CPU generator's state before the op
    whole: bool  # overwrote every element


@dataclass
class _Param:
    param: torch.nn.Parameter  # on meta; held so that its storage's address is never reused
    initial: torch.Tensor | None  # the constructor's value, when small enough to keep
    writes: list[_Write] = field(default_factory=list)


class Recording:
    """The writes to each parameter of a model built on meta; `fill` materialises the shards."""

    def __init__(self) -> None:
        self._params: dict[int, _Param] = {}  # by storage address

    def _add(self, param: torch.nn.Parameter, initial: torch.Tensor | None) -> None:
        self._params[param.untyped_storage()._cdata] = _Param(param, initial)

    def _write(self, target: torch.Tensor, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        entry = self._params.get(target.untyped_storage()._cdata)
        if entry is None:  # a temporary computed from parameters: it reaches one only through copy_, refused below
            return
        if any(isinstance(a, torch.Tensor) for a in tree_flatten((args, kwargs))[0]):
            raise NotReplayable(f"{func} wrote to a parameter from another tensor")
        if any(isinstance(a, torch.Generator) for a in tree_flatten((args, kwargs))[0]):
            raise NotReplayable(f"{func} drew from a generator of its own")
        p = entry.param
        view = (tuple(target.shape), tuple(target.stride()), target.storage_offset())
        whole = func.overloadpacket.__name__ in _OVERWRITES and view == (tuple(p.shape), tuple(p.stride()),
                                                                          p.storage_offset())
        state = torch.get_rng_state()
        if func.overloadpacket.__name__ not in ("fill_", "zero_"):
            # The CPU build draws these numbers here: draw them too, so that every later draw matches.
            func(_on_cpu(target, view), *args, **kwargs)
        entry.writes.append(_Write(func, view, args, kwargs, state, whole))

    def name(self, model: torch.nn.Module) -> None:
        """Key the records by parameter name while `model` still holds the recorded parameters:
        sharding replaces the parameters, not their names."""
        self._by_name = {name: self._params[p.untyped_storage()._cdata] for name, p in model.named_parameters()}
        for name, entry in self._by_name.items():
            if any(w.whole for w in entry.writes):
                entry.initial = None  # overwritten whole later: the constructor's value is never read
            elif entry.initial is None:
                raise NotReplayable(f"{name}: its value comes from its constructor and is too large to keep")

    def fill(self, model: torch.nn.Module) -> None:
        """Give every (sharded, materialised) parameter of `model` its recorded value, one at a time."""
        with torch.no_grad():
            for name, target in model.named_parameters():
                _local(target).copy_(_local_part(_replay(self._by_name[name]), target))


def _replay(entry: _Param) -> torch.Tensor:
    p = entry.param
    last_whole = max((i for i, w in enumerate(entry.writes) if w.whole), default=None)
    if last_whole is None:
        value = entry.initial.clone()  # kept: Recording.name refused the build otherwise
        writes = entry.writes
    else:
        value = torch.empty(p.shape, dtype=p.dtype)
        writes = entry.writes[last_whole:]
    saved = torch.get_rng_state()
    try:
        for w in writes:
            torch.set_rng_state(w.rng)
            w.op(value.as_strided(*w.view), *w.args, **w.kwargs)
    finally:
        torch.set_rng_state(saved)
    return value


def _on_cpu(target: torch.Tensor, view: tuple[tuple[int, ...], tuple[int, ...], int]) -> torch.Tensor:
    need = view[2] + sum((n - 1) * s for n, s in zip(view[0], view[1])) + 1 if all(view[0]) else 0
    return torch.empty(need, dtype=target.dtype).as_strided(*view)


def _local(param: torch.Tensor) -> torch.Tensor:
    return param.to_local() if hasattr(param, "to_local") else param


def _local_part(full: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """This rank's part of `full` (on the CPU) as `target` (a DTensor, or a plain tensor holding it all)
    keeps it, cut on the CPU so that only the part reaches the device."""
    if not hasattr(target, "device_mesh"):
        return full
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape, offset = compute_local_shape_and_global_offset(full.shape, target.device_mesh, target.placements)
    return full[tuple(slice(o, o + n) for o, n in zip(offset, shape))]


class _Recorder(TorchDispatchMode):
    def __init__(self, recording: Recording) -> None:
        super().__init__()
        self.recording = recording

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        written = [i for i, a in enumerate(func._schema.arguments)
                   if a.alias_info is not None and a.alias_info.is_write]
        for i in written:
            target = args[i] if i < len(args) else kwargs.get(func._schema.arguments[i].name)
            if isinstance(target, torch.Tensor) and target.device.type == "meta":
                if i != 0 or len(written) > 1:
                    raise NotReplayable(f"{func} writes to a parameter through an output argument")
                self.recording._write(target, func, tuple(args[1:]), dict(kwargs))
        return func(*args, **kwargs)


@contextmanager
def _parameters_on_meta(recording: Recording) -> Iterator[None]:
    """Every parameter registered meanwhile moves to meta as it is registered; buffers stay real."""
    register = torch.nn.Module.register_parameter

    def on_meta(module: torch.nn.Module, name: str, param: torch.nn.Parameter | None) -> None:
        if param is not None and param.device.type != "meta":
            initial = param.detach().clone() if param.numel() <= _KEPT_LIMIT else None
            param = type(param)(param.to("meta"), requires_grad=param.requires_grad)
            recording._add(param, initial)
        register(module, name, param)

    torch.nn.Module.register_parameter = on_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register  # type: ignore[method-assign]


def build_on_meta(build: Callable[[], torch.nn.Module], record: bool = True) -> tuple[torch.nn.Module, Recording]:
    """`build()`'s model with its parameters on meta and, when `record`, their recorded writes.
    NotReplayable when the build does something a replay cannot repeat: then build the model whole."""
    recording = Recording()
    with _parameters_on_meta(recording), _Recorder(recording) if record else nullcontext(), torch.no_grad():
        model = build()
    if record:
        recording.name(model)
    return model, recording


def allocate(model: torch.nn.Module, device: torch.device) -> None:
    """After sharding: each rank's shards, uninitialised, on `device`; buffers keep the values they
    were built with."""
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    model.to_empty(device=device)
    with torch.no_grad():
        for name, b in model.named_buffers():
            b.copy_(buffers[name])


def materialise(model: torch.nn.Module, device: torch.device, recording: Recording) -> None:
    """After sharding: each rank's shards on `device`, holding the recorded weights."""
    allocate(model, device)
    recording.fill(model)
