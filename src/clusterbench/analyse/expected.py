"""Is this number normal? A run's figures against what systems like it measure (docs/methodology.md §11).

A table of published measurements (clusterbench/analyse/expected_figures.yaml, or a team's own
file of the same form, or a `clusterbench baseline` file) names systems by facts the run's own
hardware picture states: GPU model and count, NVSwitch, nodes, ranks per node, the network's
RDMA ports, what NCCL chose, the fine-tuning task. A figure applies only when every fact it
names is known and equal; a fact the run cannot state is reported, never guessed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from clusterbench import limits
from clusterbench.analyse.metrics import Metrics, bandwidth_unit, is_per_size, kind_of
from clusterbench.errors import UsageError
from clusterbench.inputs.documents import read_yaml, version
from clusterbench.nccl.metrics import nccl_values
from clusterbench.results import documents
from clusterbench.results.run import Expected, Run
from clusterbench.stages.comm.links import active_rdma
from clusterbench.stages.hardware.records import HARDWARE, Gpu
from clusterbench.stages.train.records import TRAIN
from clusterbench.units import BITS_PER_BYTE

TABLE_KIND = "clusterbench-expected"
TABLE_VERSION = 1
_TABLE_KEYS = {"kind", "schema_version", "systems"}
UNITS = ("GB/s", "Gbps", "tokens/GPU/s", "TFLOP/s", "fraction")
_BITS = {"Gbps": 1.0, "GB/s": BITS_PER_BYTE}  # a bandwidth in bits per second
_SYSTEM_KEYS = {"system", "match", "figures"}
_FIGURE_KEYS = {"metric", "value", "low", "high", "unit", "when", "note", "source"}


@dataclass(frozen=True)
class Figure:
    metric: str
    expected: Expected
    when: dict[str, Any]


@dataclass(frozen=True)
class System:
    name: str
    match: dict[str, Any]
    figures: tuple[Figure, ...]


@dataclass(frozen=True)
class Outcome:
    expected: dict[str, Expected]
    note: str | None  # nothing matched, or what could not be compared, in words


def shipped_path() -> Path:
    return Path(str(files("clusterbench.analyse") / "expected_figures.yaml"))


def load(path: str | Path, origin: str = "file") -> list[System]:
    """A table of expected figures, or a baseline file (its means, for any system); one-line errors."""
    p = Path(path)
    label = f"--expected {p}" if origin == "file" else str(p)
    doc = read_yaml(p, label)
    if isinstance(doc, dict) and doc.get("kind") == documents.BASELINE.name:
        return [_from_baseline(p, label)]
    if not isinstance(doc, dict) or doc.get("kind") != TABLE_KIND or not isinstance(doc.get("systems"), list):
        raise UsageError(f"{label}: not a table of expected figures (kind: {TABLE_KIND}, a list of systems) "
                         "nor a clusterbench baseline")
    if set(doc) - _TABLE_KEYS:
        raise UsageError(f"{label}: unknown key(s) {', '.join(sorted(set(doc) - _TABLE_KEYS))} (a table holds "
                         f"{', '.join(sorted(_TABLE_KEYS))})")
    # A table written before tables carried a version is version 1.
    version(doc.get("schema_version", 1), label, TABLE_VERSION, "expected-figures table")
    return [_system(item, i, label, origin) for i, item in enumerate(doc["systems"], 1)]


def _from_baseline(p: Path, label: str) -> System:
    """A team's own runs as the expectation: the means of the metrics where more is better."""
    b = documents.read(p, documents.BASELINE, label)
    what = f"baseline of {len(b.runs)} run{'s' * (len(b.runs) > 1)} ({b.created_utc})"
    # Only positive figures are expectations: a range reaching 0 keeps its top alone.
    figures = tuple(
        Figure(name, Expected(s.mean, "file", what, str(p), low=s.min if s.min > 0 else None, high=s.max), {})
        for name, s in b.metrics.items()
        if kind_of(name).better == "higher" and not is_per_size(name) and s.mean > 0)
    return System(what, {}, figures)


def _system(item: Any, index: int, label: str, origin: str) -> System:
    where = f"{label}, system {index}"
    if not isinstance(item, dict) or set(item) - _SYSTEM_KEYS or not isinstance(item.get("figures"), list):
        raise UsageError(f"{where}: expected a mapping with keys {sorted(_SYSTEM_KEYS)} and a list of figures")
    name = str(item.get("system") or f"system {index}")
    match = _conditions(item.get("match"), f"{where} ({name}): match")
    figures = tuple(_figure(f, f"{where} ({name}), figure {i}", name, origin) for i, f in enumerate(item["figures"], 1))
    return System(name, match, figures)


def _figure(item: Any, where: str, system: str, origin: str) -> Figure:
    if not isinstance(item, dict) or set(item) - _FIGURE_KEYS:
        raise UsageError(f"{where}: expected a mapping with keys among {sorted(_FIGURE_KEYS)}")
    metric = item.get("metric")
    if not isinstance(metric, str) or not metric:
        raise UsageError(f"{where}: 'metric' is required (a metric's name)")
    where = f"{where} ({metric})"
    for key in ("value", "source"):
        if item.get(key) in (None, ""):
            raise UsageError(f"{where}: '{key}' is required")
    if not isinstance(item.get("note"), (str, type(None))):
        raise UsageError(f"{where}: 'note' must be text, got {item['note']!r}")
    unit = item.get("unit", "fraction")
    if unit not in UNITS:
        raise UsageError(f"{where}: unit {unit!r} is not one of {', '.join(UNITS)}")
    value, low, high = (_positive(item.get(key), key, where) for key in ("value", "low", "high"))
    if low is not None and high is not None and low > high:
        raise UsageError(f"{where}: its range is empty: low {low:g} is above high {high:g}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise UsageError(f"{where}: value {value:g} lies outside its own range "
                         f"{'' if low is None else f'{low:g}'}..{'' if high is None else f'{high:g}'}")
    scale = _scale(unit, metric, where)
    low, high = (None if x is None else x * scale for x in (low, high))
    expected = Expected(value * scale, origin, system, str(item["source"]), low, high, item.get("note"))
    return Figure(metric, expected, _conditions(item.get("when"), f"{where}: when"))


def _positive(value: Any, key: str, where: str) -> float | None:
    """A figure's value or an end of its range: a positive number (the boundary let through finite ones only)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
        raise UsageError(f"{where}: '{key}' must be a positive number, got {value!r}")
    return None if value is None else float(value)


def _scale(unit: str, metric: str, where: str) -> float:
    """What turns a figure in `unit` into the metric's own unit (comm bandwidth is kept in Gbps)."""
    if unit not in _BITS:
        return 1.0
    native = bandwidth_unit(metric)
    if native is None:
        raise UsageError(f"{where}: unit {unit} given for {metric}, which is no bandwidth")
    return _BITS[unit] / _BITS[native]


def _conditions(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UsageError(f"{where}: expected a mapping of facts to values")
    unknown = set(value) - set(FACTS)
    if unknown:
        raise UsageError(f"{where}: unknown fact(s) {', '.join(sorted(unknown))}; known: {', '.join(FACTS)}")
    return value


# Each fact a table may name, and what it means; facts() states them for a run.
FACTS = {
    "device": "cuda or cpu",
    "gpu": "the GPU model as the peak table names it (H100 SXM, H200, A100, B200...), else NVML's name",
    "gpus": "GPUs on rank 0's host",
    "nvlink": "the NVLink generation all of them have",
    "nvswitch": "every GPU's NVLinks reach NVSwitches",
    "nodes": "nodes the job ran on",
    "ranks_per_node": "ranks on every node (the same on each)",
    "nic": "the label every active RDMA port of rank 0's host shares (IB NDR, IB HDR, RoCE 400GbE)",
    "nccl.nvls": "1 when NCCL's log shows NVLS channels, 0 when it shows none",
    "train.preset": "the fine-tuning model preset",
    "train.parallel": "ddp or fsdp",
    "train.dtype": "the training dtype",
    "train.seq_len": "tokens per row",
}


def facts(run: Run) -> dict[str, Any]:
    """What this run states about itself. A fact that does not apply (no GPU, no RDMA port, no
    NCCL) is absent; one that applies but the run cannot state is None."""
    found: dict[str, Any] = {"device": run.env.device_type}
    per_node = Counter(p.node for p in run.env.ranks)
    if per_node:
        found["nodes"] = len(per_node)
        found["ranks_per_node"] = next(iter(per_node.values())) if len(set(per_node.values())) == 1 else None
    elif run.env.hosts:  # a folder from before ranks were placed: its hosts, not how many ranks each ran
        found["nodes"], found["ranks_per_node"] = len(set(run.env.hosts)), None
    gpus = HARDWARE.of(run).gpus if HARDWARE.of(run) else []
    if gpus:
        found["gpus"] = len(gpus)
        # A model the peak table does not know keeps its own name, and so matches no system.
        models = {_model(g.name) for g in gpus}
        found["gpu"] = models.pop() if len(models) == 1 else None
        versions = {g.nvlink_version for g in gpus}
        found["nvlink"] = versions.pop() if len(versions) == 1 else None
        switched = {_switched(g) for g in gpus}
        found["nvswitch"] = False if False in switched else (None if None in switched else True)
    labels = {p.label for p in active_rdma(HARDWARE.of(run))}
    if labels:
        found["nic"] = labels.pop() if len(labels) == 1 else None
    if run.env.backend == "nccl":
        nvls = nccl_values(run).get("nccl.nvls")
        found["nccl.nvls"] = None if nvls is None else int(nvls[0])
    if TRAIN.of(run) is not None:
        c = TRAIN.of(run).config
        found |= {"train.preset": c.preset, "train.parallel": c.parallel, "train.dtype": c.dtype,
                  "train.seq_len": c.seq_len}
    return found


def _switched(gpu: Gpu) -> bool | None:
    """Whether a GPU's NVLinks reach NVSwitches; None when NVML did not say what an active link reaches."""
    active = [link for link in gpu.nvlink_links if link.active]
    if any(link.remote_type == "NVSwitch" for link in active):
        return True
    return None if any(link.remote_type is None for link in active) else False


def _model(name: str | None) -> str | None:
    entry = limits.peak_entry(name) if name else None
    return entry.label if entry else name


def _differs(conditions: dict[str, Any], known: dict[str, Any]) -> bool:
    """A condition on a fact that does not apply to this run, or that it states otherwise."""
    return any(key not in known or (known[key] is not None and known[key] != want)
               for key, want in conditions.items())


def _unknown(conditions: dict[str, Any], known: dict[str, Any]) -> list[str]:
    return [key for key in conditions if known.get(key) is None]


def match(run: Run, metrics: Metrics, tables: list[list[System]]) -> Outcome:
    """The expected figure of each metric this run has, the first table that has one winning;
    and, when nothing applies, which facts kept which figures out."""
    known = facts(run)
    have = metrics.values
    found: dict[str, Expected] = {}
    blocked: dict[str, str] = {}  # why a figure was left out -> its metric
    for table in tables:
        for system in table:
            if _differs(system.match, known):
                continue
            for figure in system.figures:
                if figure.metric in found or figure.metric not in have or _differs(figure.when, known):
                    continue
                missing = _unknown({**system.match, **figure.when}, known)
                if missing:
                    why = f"{figure.metric} of {system.name} (this run cannot tell {', '.join(missing)})"
                    blocked[why] = figure.metric
                else:
                    found[figure.metric] = figure.expected
    left_out = [why for why, metric in blocked.items() if metric not in found]
    note = None
    if left_out:
        note = "not compared: " + "; ".join(left_out)
    elif not found:
        note = f"no system in the table matches this run ({describe(known)})"
    return Outcome(found, note)


def describe(known: dict[str, Any]) -> str:
    """The facts as one phrase, for a message that says why nothing matched."""
    parts = [f"{known['gpus']} x {known['gpu'] or 'GPUs of several models'}" if "gpus" in known
             else f"device {known.get('device') or '?'}"]
    for key in ("nvlink", "nodes", "ranks_per_node", "nic", "train.preset"):
        if known.get(key) is not None:
            parts.append(f"{key} {known[key]}")
    return ", ".join(parts)


def tables(extra: list[Path]) -> list[list[System]]:
    """The user's tables first (their figures win), then the shipped one."""
    return [load(p) for p in extra] + [load(shipped_path(), "shipped")]


def attach(run: Run, metrics: Metrics, found_in: list[list[System]], given: dict[str, Expected]) -> None:
    """Set the run's expected figures: those given on the command line win over the tables'."""
    outcome = match(run, metrics, found_in)
    run.expected = {**outcome.expected, **given}
    run.expected_note = outcome.note


def whose(e: Expected) -> str:
    """Where an expected figure comes from, as a line or a report says it."""
    if e.origin == "given":
        return "the expected figure (--expect-busbw)"
    return f"what systems like this measure ({e.system}: {e.source})"


def lines(run: Run, m: Metrics) -> list[str]:
    """One terminal line per expected figure, and the note of what was not compared."""
    found = [f"# expected: {m.notes.get(name) or f'{name} = {m.values[name]:.4g}'} = "
             f"{m.values[name] / e.value:.0%} of {whose(e)}" for name, e in sorted(run.expected.items())
             if name in m.values]
    return found + ([f"# expected figures: {run.expected_note}"] if run.expected_note else [])
