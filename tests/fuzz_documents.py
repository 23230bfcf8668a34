"""What tests/test_fuzz.py feeds the CLI as documents: good ones, and the damage done to them, each
as a small value whose repr reads as the input it makes, so a finding can be pasted into the
regression table as Hypothesis printed it.

Each damage also says whether every reader must refuse it (exit 2): a number that is not finite,
a document nested 100,000 deep, a schema version that is not a known integer, truncated JSON, a
value of another type in a typed document, a path that is no regular file. Other damage (a
deleted field, a flipped byte) may leave a document that is still good, so it is held only to
the promise every input is: one short line, a documented exit code, no hang, nothing changed.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st
from report_fixtures import as_run, gpu_run_doc

from clusterbench.analyse import baseline as baselines
from clusterbench.analyse.expected import shipped_path
from clusterbench.analyse.rules import default_rules_path
from clusterbench.results import codec, documents
from clusterbench.stages.registry import metrics_of
from clusterbench.stages.train.references import shipped_dir
from clusterbench.telemetry.records import Sample, StageWindow, Telemetry
from clusterbench.telemetry.summary import device_stage

DATA = Path(__file__).parent / "data"
NCCL_LOGS = sorted((DATA / "nccl").glob("*.log"))
DEPTH = 100_000  # the nesting the issue found breaking every reader

Key = str | int
Where = tuple[Key, ...]


# -- values no Python object serialises to, written into the text as raw tokens --------------------

@dataclass(frozen=True)
class Token:
    """Raw text in a document: NaN and friends, nesting too deep to build, a number or string too long."""

    name: str

    def text(self, fmt: str) -> str:
        if self.name == "deep[":
            return "[" * DEPTH + "]" * DEPTH
        if self.name == "deep{":
            return '{"a":' * DEPTH + "1" + "}" * DEPTH
        return _TOKENS[self.name][fmt == "yaml"]

    @property
    def must_refuse(self) -> bool:
        return self.name in NONFINITE or self.name.startswith("deep")


NONFINITE = ("nan", "inf", "-inf", "1e999")
_TOKENS = {  # name: (as JSON writes it, as YAML does)
    "nan": ("NaN", ".nan"), "inf": ("Infinity", ".inf"), "-inf": ("-Infinity", "-.inf"),
    "1e999": ("1e999", "1.0e+999"),
    "digits": ("9" * 5000,) * 2,  # past Python's 4300-digit limit on int()
    "huge": ('"' + "x" * 2_000_000 + '"',) * 2,
}
TOKENS = [Token(n) for n in (*_TOKENS, "deep[", "deep{")]
_LOG_JUNK = {  # what a log holds after a crash, a full disk or a rank gone mad
    "nul": "\x00", "bad utf-8": "\udcff\udcfe", "2 MB line": "x" * 2_000_000, "100k newlines": "\n" * 100_000,
    "100k INFO": "NCCL INFO " * 100_000, "50k brackets": " [" * 50_000,
    "50k ranks": "NCCL INFO Channel 00/99999999 :" + " 0" * 50_000 + "\n",
}
_TOKENS |= {name: (text,) * 2 for name, text in _LOG_JUNK.items()}


def _tokens_in(value: Any) -> list[Token]:
    if isinstance(value, Token):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tokens_in(v)]
    if isinstance(value, list):
        return [t for v in value for t in _tokens_in(v)]
    return []


# -- damage ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Set:
    """The node at `where` gets `value` (a Token for what JSON cannot hold); () is the whole document."""

    where: Where
    value: Any


@dataclass(frozen=True)
class Delete:
    where: Where


@dataclass(frozen=True)
class Add:
    """A field the document's schema does not have, in the mapping at `where`."""

    where: Where
    value: Any


@dataclass(frozen=True)
class Each:
    """Field `name` of every item of the list at `where` gets `value`: a whole sweep's figures at once."""

    where: Where
    name: str
    value: Any


@dataclass(frozen=True)
class Truncate:
    at: int  # bytes kept (modulo the document's length)


@dataclass(frozen=True)
class Flip:
    at: int  # modulo the document's length
    byte: int


@dataclass(frozen=True)
class Digits:
    """A log line's n-th run of digits (modulo those it has) replaced by `text`."""

    line: int
    nth: int
    text: str | Token


@dataclass(frozen=True)
class Insert:
    at: int
    text: Token


@dataclass(frozen=True)
class Kind:
    """The document's path is no regular file: fifo, folder, dangling, zero (/dev/zero), loop, empty."""

    kind: str


KINDS = ("fifo", "folder", "dangling", "zero", "loop", "empty")
UNKNOWN_FIELD = "zz_unknown"

Damage = Set | Delete | Add | Each | Truncate | Flip | Digits | Insert | Kind


# -- the documents -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Doc:
    name: str
    fmt: str  # json, yaml or log
    good: Any  # the parsed good document (the text, for a log)
    typed: bool = False  # read through the typed codec: a value of another type never fits
    free: tuple[str, ...] = ()  # fields that hold any shape (a model's config.json)
    mappings: tuple[str, ...] = ()  # fields whose keys are data, not schema
    optional: bool = False  # its reader goes on without it, saying why (telemetry.csv beside run.json)

    def render(self, damage: Damage | None) -> bytes:
        """The document's bytes after `damage` (a Kind is the caller's business: the good bytes)."""
        if self.fmt == "log":
            return _damage_text(self.good, damage)
        doc = self.good
        if isinstance(damage, (Set, Delete, Add, Each)):
            doc = _edit(doc, damage)
        text = _serialise(doc, self.fmt)
        return _damage_bytes(text.encode(), damage) if isinstance(damage, (Truncate, Flip)) else text.encode()

    def must_refuse(self, damage: Damage) -> bool:
        """Whether a reader that needs this document must refuse it with exit 2."""
        if self.optional:
            return False
        if isinstance(damage, Kind):
            return True
        if isinstance(damage, Truncate):
            return self.fmt == "json"  # an object cut short, or nothing
        if not isinstance(damage, (Set, Add, Each)):
            return False
        if any(t.must_refuse for t in _tokens_in(damage.value)):
            return True
        if damage.where == ("schema_version",) and "schema_version" in self.good:
            return damage.value != self.good["schema_version"]
        if self.name == "rules" and len(damage.where) == 3 and isinstance(damage, Set):
            return _bad_rule_field(str(damage.where[2]), damage.value)
        if self.name == "rules" and isinstance(damage, Each) and damage.where == ("rules",):
            return _bad_rule_field(damage.name, damage.value)
        if self.name == "expected" and _impossible_figure(_edit(self.good, damage)):
            return True
        if not self.typed or any(k in self.free for k in damage.where if isinstance(k, str)):
            return False
        if isinstance(damage, Add):
            return not damage.where or damage.where[-1] not in self.mappings
        if isinstance(damage, Each):
            return _incompatible(_at(self.good, (*damage.where, 0, damage.name)), damage.value)
        return _incompatible(_at(self.good, damage.where), damage.value)


def _incompatible(old: Any, new: Any) -> bool:
    """A value no field typed as `old` is can hold (null aside: many fields are optional)."""
    kinds = {_kind(old), _kind(new)}
    return "null" not in kinds and len(kinds) == 2


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, Token):
        return {"huge": "text", "deep[": "list", "deep{": "map"}.get(value.name, "number")
    for kind, types in (("bool", bool), ("number", (int, float)), ("text", str), ("list", list), ("map", dict)):
        if isinstance(value, types):
            return kind
    raise TypeError(value)


def _bad_rule_field(name: str, value: Any) -> bool:
    """A value no rule can have in field `name` (the grammar of analyse/rules.py's docstring)."""
    if value == Token("huge"):
        value = "x"  # a long text is still text
    def pattern(p: Any) -> bool:
        if not isinstance(p, str) or not p:
            return False
        try:
            re.compile(p[3:]) if p.startswith("re:") else None
        except re.error:
            return False
        return True
    if name == "metric":
        return not (pattern(value) or (isinstance(value, list) and value and all(map(pattern, value))))
    if name == "criteria":
        match = isinstance(value, str) and _CRITERIA.fullmatch(value)
        return not match or not math.isfinite(float(match.group(2)))
    allowed = {"level": ("WARN", "FAIL"), "missing": ("error", "skip", "ignore", "WARN", "FAIL"),
               "function": ("value", "change", "expected")}
    if name in allowed:
        return value not in allowed[name]
    if name == "origin":
        origins = [value] if isinstance(value, str) else value
        return not (isinstance(origins, list) and origins and set(origins) <= {"given", "file", "shipped"})
    return False


_CRITERIA = re.compile(r"\s*(<=|>=|==|!=|<|>)\s*([-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)\s*", re.ASCII)


def _impossible_figure(doc: Any) -> bool:
    """An expected figure whose bounds cannot hold: low above high, or the value outside them."""
    try:
        figures = [f for s in doc["systems"] for f in s["figures"]]
    except (TypeError, KeyError):
        return False

    def number(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)
    for f in figures:
        if not isinstance(f, dict):
            continue
        low, value, high = f.get("low"), f.get("value"), f.get("high")
        if number(low) and number(high) and low > high:
            return True
        if number(value) and ((number(low) and value < low) or (number(high) and value > high)):
            return True
    return False


def _at(doc: Any, where: Where) -> Any:
    for key in where:
        doc = doc[key]
    return doc


def _edit(doc: Any, damage: Set | Delete | Add | Each) -> Any:
    if not damage.where and isinstance(damage, Set):
        return damage.value
    doc = json.loads(json.dumps(doc))  # a copy; the good document is shared by every example
    if isinstance(damage, Each):
        for item in _at(doc, damage.where):
            item[damage.name] = damage.value
        return doc
    *parents, last = damage.where if not isinstance(damage, Add) else (*damage.where, UNKNOWN_FIELD)
    node = _at(doc, parents)
    if isinstance(damage, Delete):
        del node[last]
    else:
        node[last] = damage.value
    return doc


def _serialise(doc: Any, fmt: str) -> str:
    tokens: list[Token] = []

    def mark(value: Any) -> Any:
        if isinstance(value, Token):
            tokens.append(value)
            return f"__raw{len(tokens) - 1}__"
        if isinstance(value, dict):
            return {k: mark(v) for k, v in value.items()}
        if isinstance(value, list):
            return [mark(v) for v in value]
        return value
    marked = mark(doc)
    if fmt == "json":
        text = json.dumps(marked, indent=1)
        quoted = '"{}"'
    else:
        text = yaml.safe_dump(marked, sort_keys=False, allow_unicode=True, width=1 << 30)
        quoted = "{}"
    for i, token in enumerate(tokens):
        text = text.replace(quoted.format(f"__raw{i}__"), token.text(fmt), 1)
    return text


def _damage_bytes(data: bytes, damage: Truncate | Flip | Insert) -> bytes:
    if isinstance(damage, Truncate):
        return data[: damage.at % len(data)]
    at = damage.at % len(data)
    if isinstance(damage, Flip):
        return data[:at] + bytes([damage.byte]) + data[at + 1:]
    return data[:at] + damage.text.text("log").encode("utf-8", "surrogateescape") + data[at:]


def _damage_text(text: str, damage: Damage | None) -> bytes:
    if isinstance(damage, Digits):
        lines = text.splitlines()
        i = damage.line % len(lines)
        runs = list(re.finditer(r"\d+", lines[i]))
        if runs:
            run = runs[damage.nth % len(runs)]
            digits = damage.text.text("log") if isinstance(damage.text, Token) else damage.text
            lines[i] = lines[i][: run.start()] + digits + lines[i][run.end():]
        text = "\n".join(lines) + "\n"
    data = text.encode()
    return _damage_bytes(data, damage) if isinstance(damage, (Truncate, Flip, Insert)) else data


# -- the good documents --------------------------------------------------------------------------

def reference_doc() -> dict[str, Any]:
    return json.loads((shipped_dir() / "tiny-cpu-float32.json").read_text())


@functools.cache
def good_run_doc() -> dict[str, Any]:
    """A complete run on a DGX H100 whose train section is the shipped tiny reference's task, so every
    reader of run folders (align too) has something to do with it."""
    ref = reference_doc()
    doc = gpu_run_doc(json.loads((DATA / "hardware" / "dgx-h100.json").read_text()))
    doc["env"]["ranks"] = [{"rank": r, "node": "dgx-h100-01", "local_rank": r, "device": f"cuda:{r}"}
                           for r in range(8)]
    doc["train"]["config"].update(task=ref["task"], model_hash=ref["model"]["config_hash"], global_batch=16,
                                  micro_batch=2, seq_len=ref["seq_len"], packing=ref["packing"], steps=ref["steps"])
    doc["train"]["losses"] = list(ref["losses"])
    samples = telemetry_samples()
    devices = [device_stage("NVIDIA H100 80GB HBM3", [s for s in samples if (s.stage, s.device) == (stage, gpu)])
               for stage in ("comm", "train") for gpu in ("GPU0", "GPU1")]
    windows = [StageWindow("comm", 0.0, 10.0), StageWindow("train", 10.5, 30.0)]
    doc["telemetry"] = codec.dump(Telemetry(10.0, 1.7e9, windows, devices))
    return doc


def telemetry_samples() -> list[Sample]:
    """Two GPUs sampled through the comm and train stages, as telemetry.csv beside run.json holds them."""
    return [Sample(t / 10, "comm" if t < 100 else "train", "dgx-h100-01", f"GPU{gpu}", gpu, clock_mhz=1980.0 - gpu,
                   power_w=600.0 + t, temperature_c=60.0, util_pct=97.0, xid=0, throttle="none")
            for t in range(0, 300, 7) for gpu in range(2)]


def telemetry_csv() -> str:
    rows = [codec.dump(s) for s in telemetry_samples()]
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


@functools.cache
def documents_by_name() -> dict[str, Doc]:
    run = good_run_doc()
    figures = metrics_of(as_run(run)).values
    baseline = json.loads(documents.to_text(baselines.build([("good", figures), ("other", figures)])))
    return {d.name: d for d in (
        Doc("run", "json", run, typed=True, free=("model_config",),
            mappings=("expected", "versions", "settings", "throttle")),
        Doc("baseline", "json", baseline, typed=True, mappings=("metrics",)),
        Doc("reference", "json", reference_doc(), typed=True),
        Doc("rules", "yaml", yaml.safe_load(default_rules_path().read_text())),
        Doc("expected", "yaml", yaml.safe_load(shipped_path().read_text())),
        Doc("telemetry", "log", telemetry_csv(), optional=True),
        *(Doc(f"log:{p.name}", "log", p.read_text()) for p in NCCL_LOGS),
    )}


# -- strategies: damage ----------------------------------------------------------------------------

def _paths(doc: Any, where: Where = ()) -> list[Where]:
    found = [where]
    if isinstance(doc, dict):
        for k, v in doc.items():
            found += _paths(v, (*where, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            found += _paths(v, (*where, i))
    return found


SCHEMA_VERSIONS = [True, False, "3", "1", 3.0, 1.0, 99, 0, -1, None, [], 2**64]
TEXTS = ["", " ", "x", "3", "true", "null", "NaN", "-1", "☃", "\u202e", "a\nb", "../../etc/passwd", "%s%n", "re:(.|.)*X"]
NUMBERS = [0, -1, 1, 2**31, 2**63, -(2**63), 10**400, 1e-300, 1e300, 5e-324, 0.5, -0.0]


def _hostile_values(old: Any) -> st.SearchStrategy[Any]:
    """Values for a node that held `old`: non-finite and oversized tokens, other types, edge cases of its own."""
    own = {"number": st.sampled_from(NUMBERS) | st.floats(allow_nan=False, allow_infinity=False),
           "text": st.sampled_from(TEXTS), "bool": st.sampled_from([0, 1, "true", "yes"]),
           "list": st.sampled_from([[], [None], [[]], {}]), "map": st.sampled_from([{}, [], {"": None}]),
           "null": st.sampled_from([0, "", [], {}])}[_kind(old)]
    others = st.sampled_from([True, False, None, 1, 2.5, "1", "fast", [], [1], {}, {"x": 1}])
    return st.one_of(st.sampled_from(TOKENS), own, others)


@functools.cache
def _grouped_paths(name: str) -> dict[Key, list[Where]]:
    """The document's paths under each top-level field, so a run's 500 comm cells do not drown the rest."""
    groups: dict[Key, list[Where]] = {}
    for where in _paths(documents_by_name()[name].good)[1:]:
        groups.setdefault(where[0], []).append(where)
    return groups


@functools.cache
def _mapping_paths(name: str) -> list[Where]:
    """Where a field can be added: every mapping in the document."""
    good = documents_by_name()[name].good
    return [w for w in _paths(good) if isinstance(_at(good, w), dict)]


@functools.cache
def _columns(name: str) -> list[tuple[Where, str]]:
    """Each list of records in the document, with each field of its records."""
    good = documents_by_name()[name].good
    return [(w, k) for w in _paths(good) if isinstance(_at(good, w), list) and _at(good, w)
            and isinstance(_at(good, w)[0], dict) for k in _at(good, w)[0]]


def _where(name: str) -> st.SearchStrategy[Where]:
    groups = _grouped_paths(name)
    return st.sampled_from(sorted(groups, key=str)).flatmap(lambda k: st.sampled_from(groups[k]))


def damage(name: str) -> st.SearchStrategy[Damage]:
    """Any damage to document `name`: structural edits, then bytes, then what the path is."""
    doc = documents_by_name()[name]
    size = len(doc.render(None))
    nbytes = st.integers(0, size - 1)
    on_bytes = st.one_of(st.builds(Truncate, nbytes), st.builds(Flip, nbytes, st.integers(0, 255)),
                         st.builds(Kind, st.sampled_from(KINDS)))
    if doc.fmt == "log":
        numbers = st.sampled_from(["0", "-1", "99999999999999999999", Token("digits"), "", "x", "1e999", "4294967296"])
        junk = st.sampled_from([Token(name) for name in _LOG_JUNK])
        return st.one_of(on_bytes, st.builds(Digits, st.integers(0, 10_000), st.integers(0, 20), numbers),
                         st.builds(Insert, nbytes, junk))
    edits = [
        _where(name).flatmap(lambda w: st.builds(Set, st.just(w), _hostile_values(_at(doc.good, w)))),
        _where(name).map(Delete),
        st.builds(Add, st.sampled_from(_mapping_paths(name)), _hostile_values(None)),
        st.builds(Set, st.just(("schema_version",)), st.sampled_from(SCHEMA_VERSIONS)),
        st.builds(Set, st.just(()), st.sampled_from([Token("deep["), Token("deep{"), [], 5, "x", None, Token("nan")])),
    ]
    if _columns(name):
        edits.append(st.sampled_from(_columns(name)).flatmap(lambda c: st.builds(
            Each, st.just(c[0]), st.just(c[1]), _hostile_values(_at(doc.good, (*c[0], 0, c[1]))))))
    return st.one_of(st.one_of(*edits), on_bytes)


def rule_values() -> st.SearchStrategy[Set]:
    """A rule's fields given what users get wrong: backtracking regexes, numbers as metrics, odd criteria."""
    regexes = ["re:(.|.)*X", "re:(a|aa)*$", "re:(.*)*Z", "re:(x+x+)+y", "re:[", "re:", "re:.*", "*", "", 5,
               ["comm.*", 3], [], "comm.*" * 200, Token("nan")]
    criteria = [">= 1e999", ">= nan", "== -0", ">=", "", "=> 1", ">= 0.9 or 1", ">= 1e-999", Token("inf"), 0.9, True]
    index = st.integers(0, len(documents_by_name()["rules"].good["rules"]) - 1)
    return st.one_of(
        st.builds(Set, st.tuples(st.just("rules"), index, st.just("metric")), st.sampled_from(regexes)),
        st.builds(Set, st.tuples(st.just("rules"), index, st.just("criteria")), st.sampled_from(criteria)),
        st.builds(Set, st.tuples(st.just("rules"), index, st.sampled_from(["level", "missing", "function", "origin",
                                                                            "name"])),
                  st.sampled_from(["skip", "ignore", "PASS", "warn", 1, None, [], ["file", "file"]])))


@functools.cache
def metric_names() -> list[str]:
    return sorted(metrics_of(as_run(good_run_doc())).values)


def rule_lists() -> st.SearchStrategy[Set]:
    """Whole rules files of a few good rules, for the verdicts rather than the parser: rules that match
    nothing, rules that WARN, rules skipped, a summary over them."""
    metric = st.sampled_from(metric_names()) | st.sampled_from(
        ["nosuch.metric", "train.*", "comm.*", "*", "re:train\\..*", "peaks.*", "nccl.*", "telemetry.*", "canary.*"])
    optional = {"level": st.sampled_from(["WARN", "FAIL"]), "missing": st.sampled_from(["error", "skip", "ignore",
                                                                                        "WARN", "FAIL"]),
                "function": st.sampled_from(["value", "change", "expected"]),
                "origin": st.sampled_from(["given", "file", "shipped", ["file", "shipped"]])}
    rule = st.fixed_dictionaries({"metric": metric, "criteria": st.sampled_from([">= 0", "< 0", "== 1", ">= 0.9",
                                                                                 "!= 0", "> 1e300"])},
                                 optional=optional)
    return st.builds(Set, st.just(("rules",)), st.lists(rule, min_size=1, max_size=3))
