"""Which model trains: a preset (stages/train/presets.py), a user config.json, or a local checkpoint.

The parent process resolves the choice to a plain config dict (`ModelSpec`), so errors
surface before any rank starts and the spec pickles cheaply to every rank; for presets it
does so without importing transformers (seconds of start-up on a small machine). Each rank then
builds the model on the CPU right after torch.manual_seed(seed): CPU initialisation does
not depend on the thread count or the world size, so every rank of every world size starts
from bitwise the same weights, and the model is moved to its device afterwards. A model to be
sharded is built with its parameters on meta instead (`build_unfilled`), and each rank fills only
its shards once sharded: the same weights, without the whole model on any rank.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch

from clusterbench.errors import UsageError
from clusterbench.inputs.documents import read_json
from clusterbench.stages.train import deferred
from clusterbench.stages.train.presets import PRESETS

# Config keys that do not change the computation; left out of the hash that identifies a model.
_VOLATILE_KEYS = {"transformers_version", "_name_or_path", "architectures", "dtype", "torch_dtype",
                  "use_cache", "output_attentions", "output_hidden_states", "return_dict",
                  "id2label", "label2id", "problem_type", "chunk_size_feed_forward", "_attn_implementation"}


@dataclass(frozen=True)
class ModelSpec:
    """A resolved model choice: `name` for humans, `config` for transformers."""

    name: str  # preset name, "config:<file>" or "path:<dir>"
    config: dict[str, Any]  # as given: the preset's keys, or the config.json's
    path: str | None = None  # a local checkpoint to load weights from

    @property
    def config_hash(self) -> str:
        return config_hash(self.config)

    @property
    def max_positions(self) -> int | None:
        if "max_position_embeddings" in self.config:
            return self.config["max_position_embeddings"]
        # Other architectures name it differently (GPT-2: n_positions); transformers maps the names.
        from transformers import AutoConfig

        try:
            return getattr(AutoConfig.for_model(**self.config), "max_position_embeddings", None)
        except (ValueError, KeyError, TypeError):
            return None


def config_hash(config: dict[str, Any]) -> str:
    """A short digest of the config as given (not transformers' expansion of it, which changes
    between versions), without the keys that do not change the computation."""
    kept = {k: v for k, v in config.items() if k not in _VOLATILE_KEYS}
    text = json.dumps(kept, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def resolve(preset: str | None, model_config: str | None, model_path: str | None) -> ModelSpec:
    """Turn --preset / --model-config / --model-path into a ModelSpec (at most one of them)."""
    chosen = [o for o, v in (("--preset", preset), ("--model-config", model_config),
                             ("--model-path", model_path)) if v]
    if len(chosen) > 1:
        raise UsageError(f"give one of {', '.join(chosen)}, not several")
    if model_config:
        return ModelSpec(f"config:{Path(model_config).name}", _read_config_json(Path(model_config)))
    if model_path:
        p = Path(model_path)
        if not (p / "config.json").is_file():
            raise UsageError(f"--model-path {model_path}: no config.json there (expected a local "
                             f"transformers checkpoint directory)")
        return ModelSpec(f"path:{p.name}", _read_config_json(p / "config.json"), path=str(p))
    name = preset or "tiny"
    if name not in PRESETS:
        raise UsageError(f"unknown preset {name!r}: choose from {', '.join(PRESETS)}")
    return ModelSpec(name, {"model_type": "llama", **PRESETS[name]})


def _read_config_json(path: Path) -> dict[str, Any]:
    if path.is_dir():
        path = path / "config.json"
    raw = read_json(path, f"model config {path}")
    if not isinstance(raw, dict) or not isinstance(raw.get("model_type"), str):
        raise UsageError(f'model config {path}: no "model_type" naming an architecture (expected a transformers '
                         'config.json)')
    _check_sizes(raw, path)
    _check_buildable(raw, path)
    return raw


# Keys that hold a count or a size: a value below 1 cannot build a model.
_SIZE_KEY = re.compile(r"(^num_.*(heads|layers)$|_size$|_dim$|^n_(embd|layer|head|positions|inner)$|"
                       r"^max_position_embeddings$|^vocab_size$)")


def _check_sizes(raw: dict[str, Any], path: Path) -> None:
    for key, value in raw.items():
        if _SIZE_KEY.search(key) and isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise UsageError(f"model config {path}: field {key} must be at least 1, got {value}")


def _check_buildable(raw: dict[str, Any], path: Path) -> None:
    """Refuse, before any rank starts, what transformers cannot build: the config, then the model's
    shapes on the meta device (no memory is allocated)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if raw["model_type"] not in _known_model_types():
        raise UsageError(f"model config {path}: unknown model_type {raw['model_type']!r} (transformers "
                         f"{_transformers_version()} knows {len(_known_model_types())} types, e.g. llama, gpt2, qwen2)")
    try:
        config = AutoConfig.for_model(**raw)
        with torch.device("meta"):
            AutoModelForCausalLM.from_config(config)
    except Exception as e:  # noqa: BLE001 - transformers raises many kinds; each is one line for the user
        raise UsageError(f"model config {path}: {_first_line(e)}") from None


def _known_model_types() -> frozenset[str]:
    from transformers import CONFIG_MAPPING

    return frozenset(CONFIG_MAPPING.keys())


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


def _first_line(e: BaseException, limit: int = 200) -> str:
    """The root cause's first line: transformers wraps its validation errors in others."""
    while e.__cause__ is not None:
        e = e.__cause__
    lines = str(e).strip().splitlines() or [type(e).__name__]
    return lines[0] if len(lines[0]) <= limit else lines[0][: limit - 3] + "..."


def build(spec: ModelSpec, seed: int) -> torch.nn.Module:
    """The model on the CPU in float32: seeded fresh weights, or the checkpoint's."""
    return _built(spec, seed, lambda: _construct(spec))


def _construct(spec: ModelSpec) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    if spec.path is not None:
        return AutoModelForCausalLM.from_pretrained(spec.path, local_files_only=True, dtype=torch.float32)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(**spec.config), dtype=torch.float32)


def _built(spec: ModelSpec, seed: int, construct: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    torch.manual_seed(seed)
    try:
        model = construct()
    except (OSError, ValueError) as e:
        first = (str(e).strip().splitlines() or ["cannot build"])[0]
        raise UsageError(f"model {spec.name}: {first}") from None
    model.config.use_cache = False  # no KV cache during training
    return model


Fill = Callable[[torch.nn.Module, torch.device], None]  # gives a sharded model on meta its weights


@dataclass(frozen=True)
class Unfilled:
    """A model with its parameters on meta, and how each rank fills its own shards once it is sharded."""

    model: torch.nn.Module
    fill: Fill
    how: str  # for the record: where the weights came from


def build_unfilled(spec: ModelSpec, seed: int) -> Unfilled:
    """The model to shard, never whole on a rank: fresh weights are replayed into each shard
    (stages/train/deferred.py); a checkpoint is read by rank 0 alone and its shards sent to the others,
    since its bytes exist once, in a file, and not as a seed. deferred.NotReplayable when the build
    does something a replay cannot repeat: the caller then builds the model whole."""
    if spec.path is not None:
        model, _ = deferred.build_on_meta(lambda: _built(spec, seed, lambda: _construct(replace(spec, path=None))),
                                          record=False)
        return Unfilled(model, partial(_broadcast_checkpoint, spec), "checkpoint read by rank 0, shards broadcast")
    model, recording = deferred.build_on_meta(lambda: _built(spec, seed, lambda: _construct(spec)))
    return Unfilled(model, partial(deferred.materialise, recording=recording), "fresh weights replayed per shard")


def _broadcast_checkpoint(spec: ModelSpec, model: torch.nn.Module, device: torch.device) -> None:
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    deferred.allocate(model, device)
    full = build(spec, 0).state_dict() if dist.get_rank() == 0 else {}
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))


def count_params(model: torch.nn.Module) -> int:
    """Parameters of the unwrapped model; tied weights count once."""
    return sum(p.numel() for p in model.parameters())
