"""Reference loss curves: the file format, the shipped curves, and the refusal to compare
a run with a reference of another task.

The shipped curves live in train/references/<preset>-<device type>-<dtype>.json and were
made by clusterbench itself; references/README.md gives the command for each.
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from typing import Any

from clusterbench import __version__
from clusterbench.errors import UsageError
from clusterbench.results import atomic_write, read_json
from clusterbench.train import alignment

KIND = "clusterbench-loss-reference"
FORMAT = 1
# What must be equal for two curves to be comparable, and how a mismatch is named.
IDENTITY = (("task", "task"), ("model_hash", "model"), ("global_batch", "global batch"),
            ("seq_len", "seq-len"), ("packing", "packing"), ("steps", "step count"))


def identity(config: dict[str, Any]) -> dict[str, Any]:
    """The comparable identity of a run from its run.json train.config."""
    return {"task": config["task"], "model": config["preset"], "model_hash": config["model_hash"],
            "global_batch": config["global_batch"], "seq_len": config["seq_len"],
            "packing": config["packing"], "steps": config["steps"]}


def make(config: dict[str, Any], repeats: list[list[float]], env: dict[str, Any],
         argv: list[str]) -> dict[str, Any]:
    """A reference document from the curves of K repeated runs (run 1 is the reference)."""
    dev, band = alignment.noise_band(repeats)
    ident = identity(config)
    return {
        "kind": KIND,
        "format": FORMAT,
        "task": ident["task"],
        "model": {"preset": ident["model"], "config_hash": ident["model_hash"]},
        "global_batch": ident["global_batch"],
        "seq_len": ident["seq_len"],
        "packing": ident["packing"],
        "steps": ident["steps"],
        "seed": config["seed"],
        "dtype": config["dtype"],
        "lr": config["lr"],
        "lr_warmup_steps": config["lr_warmup_steps"],
        "micro_batch": config["micro_batch"],
        "parallel": config["parallel"],
        "world_size": config["world_size"],
        "hardware": {"device_type": env.get("device_type"), "devices": env.get("devices"),
                     "torch": env.get("torch")},
        "clusterbench_version": __version__,
        "command": argv,
        "repeats": len(repeats),
        "max_relative_deviation": dev,
        "noise_band": band,
        "variance_limit": alignment.variance_limit(repeats[0], band),
        "mre_limit": alignment.mre_limit(band),
        "losses": repeats[0],
    }


def check_writable(path: str) -> None:
    """Refuse, before any step runs, a --save-reference that could not be written at the end."""
    folder = Path(path).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".{Path(path).name}.write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"--save-reference {path}: cannot write there ({e.strerror or e})") from None


def save(doc: dict[str, Any], path: str) -> None:
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(p, json.dumps(doc, indent=1) + "\n")
    except OSError as e:
        raise UsageError(f"--save-reference {path}: cannot write ({e.strerror or e})") from None


def shipped_dir() -> Path:
    return Path(str(files("clusterbench.train") / "references"))


def shipped_name(preset: str, device_type: str, dtype: str) -> str:
    return f"{preset}-{device_type}-{dtype}"


def shipped_names() -> list[str]:
    return sorted(p.stem for p in shipped_dir().glob("*.json"))


def load(name_or_path: str) -> tuple[dict[str, Any], str]:
    """A reference from a file, or a shipped one by name; returns (document, its label)."""
    p = Path(name_or_path)
    if not p.is_file() and name_or_path in shipped_names():
        p = shipped_dir() / f"{name_or_path}.json"
    if not p.is_file():
        raise UsageError(f"--reference {name_or_path}: no such file (shipped references: "
                         f"{', '.join(shipped_names()) or 'none'})")
    doc = read_json(p, f"--reference {name_or_path}")
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise UsageError(f"--reference {name_or_path}: not a clusterbench loss reference")
    if doc.get("format") != FORMAT:
        raise UsageError(f"--reference {name_or_path}: format {doc.get('format')}, this clusterbench "
                         f"reads format {FORMAT}")
    losses = doc.get("losses")
    if not isinstance(losses, list) or len(losses) != doc.get("steps") or \
            not all(isinstance(x, (int, float)) and x > 0 for x in losses):
        raise UsageError(f"--reference {name_or_path}: \"losses\" must hold {doc.get('steps')} positive numbers")
    label = p.stem if p.parent == shipped_dir() else str(p)
    return doc, label


def mismatch(doc: dict[str, Any], config: dict[str, Any]) -> str | None:
    """Why `doc` cannot judge a run with this train.config, or None when it can."""
    ref = {"task": doc.get("task"), "model_hash": (doc.get("model") or {}).get("config_hash"),
           **{k: doc.get(k) for k in ("global_batch", "seq_len", "packing", "steps")}}
    run = identity(config)
    for key, label in IDENTITY:
        if ref[key] != run[key]:
            theirs = (doc.get("model") or {}).get("preset") if key == "model_hash" else ref[key]
            mine = run["model"] if key == "model_hash" else run[key]
            if key == "model_hash" and theirs == mine:
                theirs, mine = f"{theirs} (config {ref[key]})", f"{mine} (config {run[key]})"
            return f"the reference was made for {label} {theirs}, this run has {mine}"
    return None
