"""Untrusted pickles read as plain data: the boundary a Flight Recorder dump passes before anyone looks at it.

A pickle is a program: its GLOBAL and REDUCE opcodes import and call anything, so a dump copied off
a cluster is never handed to `pickle.load`. The unpickler here resolves no global and no persistent
id, so the only values it can build are those pickle's own opcodes make (dicts, lists, tuples, text,
numbers, true/false, None, and bytes and sets, which are refused after). Torch writes its dumps with
protocol 2 and no globals at all, so a real dump loses nothing.

Memo references let a few hundred bytes name the same list billions of times over (each list
holding the one before twice), and a list can hold itself: the tree is copied out with a budget of
nodes that grows with the file (a real dump reuses only short strings and stack-frame records), at
most MAX_NODES, and a bound on depth, tuples becoming lists, and then passes the same checks as a
JSON document (inputs/documents.py: keys are text, numbers finite and within 64 bits). Values under
keys the reader never looks at (`drop`: a dump's stack frames, most of its bytes) are left out of
the copy unread, so whatever they hold costs nothing.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from clusterbench.errors import UsageError
from clusterbench.inputs import documents

# Nodes copied per byte of the file: a memo reference is two bytes and a shared frame record
# (name, file, line) seven nodes, so a real dump stays far below this; a memo bomb does not.
_NODES_PER_BYTE = 8
_MIN_NODES = 100_000
# 20,000 entries (ten times torch's default buffer) of some 25 values each, with room to spare.
MAX_NODES = 5_000_000


class _PlainUnpickler(pickle.Unpickler):
    """Builds only what pickle's opcodes build by themselves: no import, no call."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names the Python object {module}.{name}, which a dump never holds")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("it refers to a persistent object, which a dump never holds")


def _plain(root: Any, budget: int, label: str, drop: frozenset[str]) -> Any:
    """A fresh copy of `root` with tuples as lists and no key of `drop`, within `budget` nodes and
    MAX_DEPTH levels."""
    out: list[Any] = [None]
    stack: list[tuple[Any, int, Any, Any]] = [(root, 0, out, 0)]  # (node, depth, parent copy, key in it)
    while stack:
        node, depth, parent, key = stack.pop()
        budget -= 1
        if budget < 0:
            raise UsageError(f"{label}: not a Flight Recorder dump (its references unfold into more values "
                             "than a file of its size can hold)")
        if depth > documents.MAX_DEPTH:
            raise UsageError(f"{label}: not a Flight Recorder dump (nested more than {documents.MAX_DEPTH} "
                             "levels deep, or a value that holds itself)")
        if isinstance(node, dict):
            copy: Any = {}
            stack.extend((v, depth + 1, copy, k) for k, v in node.items() if k not in drop)
        elif isinstance(node, (list, tuple)):
            copy = [None] * len(node)
            stack.extend((v, depth + 1, copy, i) for i, v in enumerate(node))
        else:
            copy = node
        parent[key] = copy
    return out[0]


def loads(data: bytes, label: str, drop: frozenset[str] = frozenset()) -> Any:
    """The plain data a pickle holds, less the values of `drop` keys, or a one-line UsageError naming
    `label` and what is wrong."""
    try:
        doc = _PlainUnpickler(io.BytesIO(data)).load()
    except RecursionError:
        raise UsageError(f"{label}: not a Flight Recorder dump (nested too deep)") from None
    except Exception as e:  # noqa: BLE001 - bytes from outside make pickle's C code raise whatever it chooses
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if isinstance(e, EOFError):
            why = "it ends before the pickle does: truncated, or still being written"
        raise UsageError(f"{label}: not a readable Flight Recorder dump ({why})") from None
    budget = min(MAX_NODES, max(_MIN_NODES, _NODES_PER_BYTE * len(data)))
    return documents.check_tree(_plain(doc, budget, label, drop), label)
