"""What a JSON or YAML text from outside may hold before any reader looks at it.

Nesting is bounded (a document 100,000 levels deep would exhaust the parser's stack), numbers
are finite and fit 64 bits (NaN, Infinity and 1e999 are not measurements, and a 5,000-digit
integer is no count), values are JSON's own (text, numbers, true/false, null, lists, mappings
keyed by text: YAML's dates stay text, its 1e3 is a number as in JSON, its sets, pairs and
binary data are refused), YAML anchors and aliases are refused (a few lines of aliases expand
to billions of nodes), and the top level is the container the reader expects. Versions are
whole numbers a reader knows (`version`); the types of other fields are the record's business
(results/codec.py): this module makes sure there is a bounded, finite tree to check.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from clusterbench.errors import UsageError
from clusterbench.inputs import files

# The deepest document clusterbench writes nests 6 levels; a hand-written rules or expected
# file has no reason to go much further.
MAX_DEPTH = 32
# What a signed 64-bit integer holds: every count, size and id another tool (jq, pandas, C) reads.
INT_LIMIT = 2**63
_INT_DIGITS = len(str(INT_LIMIT))
_SCALARS = (str, bool, int, float, type(None))
_NAMES = ("metric", "name")  # the keys that name an item of a list (a figure, a rule)


def _not_finite(token: str) -> float:
    raise ValueError(f"{token} is not a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value


def _bounded_int(text: str) -> int:
    # Checked before int() so that a 5,000-digit number is named as such, not by Python's own limit.
    if len(text.lstrip("-+")) > _INT_DIGITS:
        raise ValueError(f"{text[:12]}... ({len(text)} digits) is too large a number")
    return int(text)


def json_name(value: Any) -> str:
    """What a value is, in the words of a JSON document."""
    if value is None:
        return "nothing"
    for kind, name in ((bool, "true/false"), (dict, "a mapping"), (list, "a list"), (str, "text"),
                       ((int, float), "a number"), (bytes, "binary data")):
        if isinstance(value, kind):
            return name
    return f"a {type(value).__name__}"


def _path(where: Any) -> str:
    """The dotted path of a node, from the (parent, step, node) links check_tree keeps; an item of
    a list shows its name where it has one, so a message about rule 7 or figure 3 says which."""
    steps = []
    while where is not None:
        where, step, node = where
        name = next((node[key] for key in _NAMES if isinstance(node, dict) and isinstance(node.get(key), str)), None)
        steps.append(str(step) if name is None or isinstance(step, str) else f"{step} ({name})")
    return ".".join(reversed(steps)) or "the document"


def check_tree(doc: Any, label: str) -> Any:
    """`doc` when it nests at most MAX_DEPTH levels of JSON's own values, keys are text and every
    number is finite and within INT_LIMIT."""
    # Paths are links, written out only for the node refused: a run.json holds a million nodes.
    stack: list[tuple[Any, int, Any]] = [(doc, 0, None)]
    while stack:
        node, depth, where = stack.pop()
        if depth > MAX_DEPTH:
            raise UsageError(f"{label}: nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, (str, bool)) or node is None:
            continue
        if isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str):
                    raise UsageError(f"{label}: {_path(where)} has the key {key!r}, which is not text (quote it)")
                stack.append((value, depth + 1, (where, key, value)))
        elif isinstance(node, list):
            stack.extend((v, depth + 1, (where, i, v)) for i, v in enumerate(node))
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise UsageError(f"{label}: {_path(where)} is {node}, not a finite number")
        elif isinstance(node, int):
            if not -INT_LIMIT <= node < INT_LIMIT:
                raise UsageError(f"{label}: {_path(where)} is {node:.3g}, too large a number")
        else:
            raise UsageError(f"{label}: {_path(where)} is {json_name(node)}, which a document cannot hold "
                             "(text, numbers, true/false, null, lists and mappings only)")
    return doc


def parse_json(text: str, label: str) -> Any:
    """A JSON text as a bounded tree of finite numbers, or a one-line UsageError."""
    return check_tree(load_json(text, label), label)


def load_json(text: str, label: str) -> Any:
    """A JSON text whose numbers are finite and within INT_LIMIT, its depth not yet checked: for a reader that
    checks a part of it itself (a Flight Recorder dump's entries), or a one-line UsageError."""
    try:
        doc = json.loads(text, parse_constant=_not_finite, parse_float=_finite_float, parse_int=_bounded_int)
    except RecursionError:
        raise UsageError(f"{label}: nested more than {MAX_DEPTH} levels deep") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{label}: not valid JSON (half-written or corrupt): {e.msg} at line {e.lineno}") from None
    except ValueError as e:  # a NaN, Infinity, 1e999 or 5,000-digit number refused while parsing
        raise UsageError(f"{label}: {e}") from None
    return doc


class _NoAliases(yaml.SafeLoader):
    """The safe loader without anchors and aliases, its dates kept as the text they were written as."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.YAMLError(f"anchors and aliases are not accepted (line {mark.line + 1})")
        return super().compose_node(parent, index)

    def construct_yaml_int(self, node: Any) -> int:
        text = self.construct_scalar(node)
        if len(str(text).replace("_", "").lstrip("-+")) > _INT_DIGITS:
            raise yaml.constructor.ConstructorError(None, None, f"{str(text)[:12]}... is too large a number",
                                                    node.start_mark)
        return super().construct_yaml_int(node)


_NoAliases.add_constructor("tag:yaml.org,2002:int", _NoAliases.construct_yaml_int)
_NoAliases.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str)
# YAML 1.1 reads 1e3 and 1.0e999 as text (its exponent needs a sign); JSON, and YAML 1.2, read numbers.
_NoAliases.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(\.[0-9_]*)?[eE][-+]?[0-9]+$"),
                                 list("-+0123456789"))


def _yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's error as one short phrase with its line, without the excerpt it draws."""
    problem, mark = getattr(e, "problem", None), getattr(e, "problem_mark", None)
    if problem is None:
        return " ".join(str(e).split())
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else problem


def parse_yaml(text: str, label: str) -> Any:
    """A YAML text (safe types, no aliases) as a bounded tree of finite numbers, or a one-line UsageError."""
    try:
        doc = yaml.load(text, Loader=_NoAliases)  # a SafeLoader: builds no Python objects
    except RecursionError:
        raise UsageError(f"{label}: nested more than {MAX_DEPTH} levels deep") from None
    except yaml.YAMLError as e:
        raise UsageError(f"{label}: not valid YAML (does not parse): {_yaml_problem(e)}") from None
    except ValueError as e:  # a scalar its tag cannot hold: !!float abc
        raise UsageError(f"{label}: not valid YAML (does not parse): {' '.join(str(e).split())}") from None
    return check_tree(doc, label)


def read_json(path: Path, label: str, limit: int = files.DOCUMENT_LIMIT) -> Any:
    """A JSON file through both boundaries: a regular file within `limit`, then a bounded tree."""
    return parse_json(files.read_text(path, label, limit), label)


def read_yaml(path: Path, label: str, limit: int = files.DOCUMENT_LIMIT) -> Any:
    """A YAML (or JSON, which YAML reads) file through both boundaries."""
    return parse_yaml(files.read_text(path, label, limit), label)


def expect(doc: Any, kind: type, label: str, what: str) -> Any:
    """`doc` when its top level is a `kind` (dict or list), else a one-line error saying what was expected."""
    if not isinstance(doc, kind):
        raise UsageError(f"{label}: expected {what}, found {json_name(doc)}")
    return doc


def whole_number(value: Any) -> bool:
    """True for an int that is not a bool: how a version or a count must be written."""
    return isinstance(value, int) and not isinstance(value, bool)


def version(value: Any, label: str, newest: int, what: str) -> int:
    """A document's schema_version: a whole number from 1 to `newest` (the newest `what` this
    clusterbench reads), or a one-line error saying what it is and what to do."""
    if not whole_number(value) or value < 1:
        shown = json.dumps(value) if isinstance(value, _SCALARS) else json_name(value)
        raise UsageError(f"{label}: schema_version {shown} is not a version (a whole number such as {newest})")
    if value > newest:
        raise UsageError(f"{label} has schema version {value}; this clusterbench reads {what} versions up to "
                         f"{newest}: upgrade clusterbench to read it")
    return value
