"""Reference loss curves: which one judges a run, making one, and the shipped ones.

Whether a reference can judge a run is decided here, from one table: the identity keys must
match for any reference (another task, model, batch, sequence length or step count is
another curve), and a shipped reference is used by default only when the run also repeats
its recipe (seed, learning rate and its ramp, dtype). The shipped curves live in
clusterbench/references/<preset>-<device type>-<dtype>.json; their README gives the command
that made each.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from clusterbench import __version__
from clusterbench.argtypes import clipped
from clusterbench.errors import UsageError
from clusterbench.inputs import files
from clusterbench.results import documents
from clusterbench.results.run import Env
from clusterbench.stages.train import alignment
from clusterbench.stages.train.records import REFERENCE, LossReference, ReferenceHardware, ReferenceModel, TrainConfig

# (train.config key, how a message names it): what must be equal for two curves to compare.
IDENTITY = (("task", "task"), ("model_hash", "model"), ("global_batch", "global batch"),
            ("seq_len", "seq-len"), ("packing", "packing"), ("steps", "step count"))
# What a shipped reference must also share to judge a run nobody asked it to judge.
RECIPE = ("seed", "lr", "lr_warmup_steps", "dtype")


def _reference_value(ref: LossReference, key: str) -> object:
    return ref.model.config_hash if key == "model_hash" else getattr(ref, key)


def mismatch(ref: LossReference, config: TrainConfig) -> str | None:
    """Why `ref` cannot judge a run with this config, or None when it can."""
    for key, label in IDENTITY:
        theirs, mine = _reference_value(ref, key), getattr(config, key)
        if theirs != mine:
            if key == "model_hash":
                theirs, mine = ref.model.preset, config.preset
                if theirs == mine:
                    theirs, mine = f"{theirs} (config {ref.model.config_hash})", f"{mine} (config {config.model_hash})"
            return f"the reference was made for {label} {clipped(str(theirs))}, this run has {clipped(str(mine))}"
    return None


def recipe_mismatch(ref: LossReference, config: TrainConfig) -> str | None:
    for key in RECIPE:
        if getattr(ref, key) != getattr(config, key):
            return f"it was made with {key} {clipped(str(getattr(ref, key)))}, this run has {clipped(str(getattr(config, key)))}"
    return None


def choose(asked: str | None, shipped: str, config: TrainConfig) -> tuple[LossReference | None, str | None, str | None]:
    """(reference, its label, None), or (None, None, why no shipped reference judges this run).

    A reference the user names must fit the task (UsageError otherwise); the shipped one for
    this preset, device and dtype is used only when it fits the task and the recipe."""
    if asked is None and shipped not in shipped_names():
        return None, None, (f"clusterbench ships no reference curve for {config.preset} in {config.dtype} on this "
                            f"device type yet ({shipped}: one is made on such hardware with `clusterbench train "
                            "--repeats K --save-reference FILE`, docs/methodology.md §5)")
    ref, label = load(asked or shipped)
    why = mismatch(ref, config)
    if asked is not None:
        if why:
            raise UsageError(f"--reference {label}: {why}")
        return ref, label, None
    why = why or recipe_mismatch(ref, config)
    if why:
        return None, None, f"the shipped {label} does not fit: {why}"
    return ref, label, None


def make(config: TrainConfig, repeats: list[list[float | None]], env: Env, argv: list[str]) -> LossReference:
    """A reference from the curves of K repeated runs (run 1 is the reference)."""
    dev, band = alignment.noise_band(repeats)
    losses = [float(x) for x in repeats[0] if x is not None]
    return LossReference(
        task=config.task, model=ReferenceModel(config.preset, config.model_hash),
        global_batch=config.global_batch, seq_len=config.seq_len, packing=config.packing, steps=config.steps,
        seed=config.seed, dtype=config.dtype, lr=config.lr, lr_warmup_steps=config.lr_warmup_steps,
        micro_batch=config.micro_batch, parallel=config.parallel, world_size=config.world_size,
        hardware=ReferenceHardware(env.device_type, list(env.devices), env.torch),
        clusterbench_version=__version__, command=list(argv), repeats=len(repeats),
        max_relative_deviation=dev, noise_band=band, variance_limit=alignment.variance_limit(losses, band),
        mre_limit=alignment.mre_limit(band), losses=losses)


def save(ref: LossReference, path: str) -> None:
    documents.write(Path(path), ref, f"--save-reference {path}")


def shipped_dir() -> Path:
    return Path(str(resources.files("clusterbench") / "references"))


def shipped_name(preset: str, device_type: str, dtype: str) -> str:
    return f"{preset}-{device_type}-{dtype}"


def shipped_names() -> list[str]:
    return sorted(p.stem for p in shipped_dir().glob("*.json"))


def load(name_or_path: str) -> tuple[LossReference, str]:
    """A reference from a file, or a shipped one by name; returns (reference, its label)."""
    p = Path(name_or_path)
    if name_or_path in shipped_names() and not files.is_regular(p):
        p = shipped_dir() / f"{name_or_path}.json"
    elif not os.path.lexists(p):  # one that is there but no regular file (a FIFO, a folder): the boundary names it
        raise UsageError(f"--reference {name_or_path}: no such file (shipped references: "
                         f"{', '.join(shipped_names()) or 'none'})")
    ref = documents.read(p, REFERENCE, f"--reference {name_or_path}")
    if len(ref.losses) != ref.steps:
        raise UsageError(f"--reference {name_or_path}: \"losses\" must hold {ref.steps} positive numbers, "
                         f"one per step (it holds {len(ref.losses)})")
    label = p.stem if p.parent == shipped_dir() else str(p)
    return ref, label
