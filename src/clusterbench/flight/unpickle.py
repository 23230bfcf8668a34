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

Before any of that, the opcodes themselves are read (not run) for what building them would cost: pickle
builds a set from one byte, an empty dict or list from one, and sizes its memo table by the largest
index a PUT names, so nine bytes can ask for gigabytes. What the opcodes would take is counted, each at
the most it can cost, and a pickle past MAX_MEMORY is refused before pickle allocates anything.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import struct
from collections.abc import Callable
from typing import Any

from clusterbench.errors import UsageError
from clusterbench.inputs import documents

# Nodes copied per byte of the file: a memo reference is two bytes and a shared frame record
# (name, file, line) seven nodes, so a real dump stays far below this; a memo bomb does not.
_NODES_PER_BYTE = 8
_MIN_NODES = 100_000
# 20,000 entries (ten times torch's default buffer) of some 25 values each, with room to spare.
MAX_NODES = 5_000_000
# The most memory the objects of one pickle may take, as _check_cost() counts it (an upper bound: a real dump takes
# about a third of it). A real dump of 20,000 entries, each with a 30-frame stack, is 14 MB and counts 0.4 GiB.
MAX_MEMORY = 1 << 30

# What one opcode can cost, in bytes, at most: a slot on pickle's stack and one in the container it goes
# into (with the room lists, dicts and sets keep for growth), plus what it builds itself. Measured on
# CPython 3.11: a flood of one-byte pushes takes 24 bytes per byte, of empty dicts or lists 59, of empty
# sets 223; an argument's bytes become at most four each (text decoded to 32-bit characters).
_PER_OPCODE = 48
_BUILDS = {"EMPTY_SET": 232, "FROZENSET": 232, "EMPTY_DICT": 72, "DICT": 72, "EMPTY_LIST": 64, "LIST": 64,
           "TUPLE": 64, "TUPLE1": 64, "TUPLE2": 64, "TUPLE3": 64}
_PER_ARGUMENT_BYTE = 4
_PER_MEMO_INDEX = 16  # pickle's memo is an array of pointers, doubled past the largest index put
_LINE, _LENGTH1, _LENGTH4, _LENGTH4U, _LENGTH8U = (pickletools.UP_TO_NEWLINE, pickletools.TAKEN_FROM_ARGUMENT1,
                                                  pickletools.TAKEN_FROM_ARGUMENT4, pickletools.TAKEN_FROM_ARGUMENT4U,
                                                  pickletools.TAKEN_FROM_ARGUMENT8U)
# Where building stops: the end, and every opcode that names a Python object or a persistent id, which
# _PlainUnpickler refuses as it reads it, so nothing after one is ever built.
_ENDS = frozenset({"STOP", "GLOBAL", "INST", "STACK_GLOBAL", "EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID"})
_END, _BUILD, _PUT_CODE = -100, -101, -102  # the end; an opcode that builds a container; a PUT into the memo


def _tables() -> tuple[list[int], list[int]]:
    """Per byte: the bytes the opcode it names takes with a fixed argument (0: no opcode; negative: _END,
    _BUILD, _PUT_CODE, or pickletools' kind of counted or line argument), and what it builds beyond
    _PER_OPCODE."""
    step, extra = [0] * 256, [0] * 256
    for op in pickletools.opcodes:
        n = op.arg.n if op.arg else 0
        # BINPUT's one-byte index is at most 255, counted at the start: the commonest opcode of a dump is no call.
        step[ord(op.code)] = (_END if op.name in _ENDS else _BUILD if op.name in _BUILDS
                              else _PUT_CODE if op.name in ("PUT", "LONG_BINPUT") else 1 + n if n >= 0 else n)
        extra[ord(op.code)] = _BUILDS.get(op.name, 0)
    return step, extra


_STEP, _EXTRA = _tables()
_U4, _I4, _U8 = struct.Struct("<I").unpack_from, struct.Struct("<i").unpack_from, struct.Struct("<Q").unpack_from
_LONG_BINPUT = ord("r")
# Past this a memo index is damage (a real dump puts one per value, in order); int() reads no longer a number.
_MAX_INDEX_DIGITS = 12


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
        # A container's children are charged before they are copied or stacked: a list of millions of
        # references to one value is refused before anything of its size is made.
        if isinstance(node, (dict, list, tuple)) and len(node) > budget:
            raise UsageError(f"{label}: not a Flight Recorder dump (its references unfold into more values "
                             "than a file of its size can hold)")
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


def _check_cost(data: bytes, label: str) -> None:
    """Count the most memory building `data`'s objects can take, from its opcodes, building none: a
    UsageError once it passes MAX_MEMORY (checked at each opcode that builds a container or takes an
    argument, so a flood of them stops early, and at the end). Where the opcodes stop making sense (an
    unknown one) the count stops: pickle itself then says what is wrong, having built no more. An argument
    that runs past the end is refused here: pickle would first allocate what its length declares."""
    i, end, opcodes, extra, memo = 0, len(data), 0, 0, 255
    step_of = _STEP
    while i < end:
        code = data[i]
        step = step_of[code]
        opcodes += 1
        if step > 0:  # most opcodes: a fixed size, nothing built beyond a value
            i += step
            continue
        if code == _LONG_BINPUT and i + 5 <= end:  # a pickle's other commonest opcode: read here, not in _put
            memo = max(memo, _U4(data, i + 1)[0])
            i += 5
        elif step == _END:
            break
        elif step == _BUILD:
            extra += _EXTRA[code]
            i += 1
        elif step == _PUT_CODE:
            i, index = _put(data, i)
            memo = max(memo, index)
        else:
            size, i = _argument(data, i, step)
            if size < 0:  # a length past the end: never handed to pickle, which would try to allocate it
                raise UsageError(f"{label}: not a readable Flight Recorder dump (it ends inside a value it declares: "
                                 "truncated, or still being written)")
            extra += _PER_ARGUMENT_BYTE * size
        if i >= end or opcodes * _PER_OPCODE + extra + _PER_MEMO_INDEX * memo > MAX_MEMORY:
            break
    if opcodes * _PER_OPCODE + extra + _PER_MEMO_INDEX * memo > MAX_MEMORY:
        raise UsageError(f"{label}: not a Flight Recorder dump (its pickle would build more than "
                         f"{MAX_MEMORY >> 30} GiB of objects, far more than any dump holds)")


def _put(data: bytes, i: int) -> tuple[int, int]:
    """For the PUT opcode at `i`: where the next opcode starts (the end where its argument runs past it or
    is no index) and the memo index it puts at."""
    op, end = data[i], len(data)
    if op == _LONG_BINPUT:
        return (end, 0) if i + 5 > end else (i + 5, _U4(data, i + 1)[0])
    line = data.find(b"\n", i + 1)  # PUT: the index in decimal, to the end of the line
    digits = data[i + 1:line]
    if line < 0 or not digits.isdigit():
        return end, 0
    return line + 1, int(digits) if len(digits) <= _MAX_INDEX_DIGITS else MAX_MEMORY


def _argument(data: bytes, i: int, kind: int) -> tuple[int, int]:
    """The size of the argument of the opcode at `i` (counted or up to a newline) and where the next opcode
    starts; a size of -1, and the end, where the argument runs past the end or the opcode is none."""
    end = len(data)
    if kind == _LENGTH1 and i + 2 <= end:
        size, start = data[i + 1], i + 2
    elif kind in (_LENGTH4, _LENGTH4U) and i + 5 <= end:
        size, start = (_I4 if kind == _LENGTH4 else _U4)(data, i + 1)[0], i + 5
    elif kind == _LENGTH8U and i + 9 <= end:
        size, start = _U8(data, i + 1)[0], i + 9
    elif kind == _LINE:
        line = data.find(b"\n", i + 1)
        return (-1, end) if line < 0 else (line - i, line + 1)
    else:
        return -1, end
    return (size, start + size) if 0 <= size <= end - start else (-1, end)


def loads(data: bytes, label: str, drop: frozenset[str] = frozenset(),
          admit: Callable[[Any], None] = lambda doc: None, raw: frozenset[str] = frozenset()) -> Any:
    """The plain data a pickle holds, less the values of `drop` keys, or a one-line UsageError naming
    `label` and what is wrong. `admit` sees what pickle built before anything is copied out of it, and
    raises to refuse it (a dump of more entries than any buffer keeps). The values of the top-level keys in
    `raw` are left as pickle built them, neither copied nor checked: for a caller that reads each of their
    values with checks of its own (a dump's entries, most of its values), whatever objects they are."""
    _check_cost(data, label)
    try:
        doc = _PlainUnpickler(io.BytesIO(data)).load()
    except RecursionError:
        raise UsageError(f"{label}: not a Flight Recorder dump (nested too deep)") from None
    except Exception as e:  # noqa: BLE001 - bytes from outside make pickle's C code raise whatever it chooses
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if isinstance(e, EOFError):
            why = "it ends before the pickle does: truncated, or still being written"
        elif isinstance(e, MemoryError):
            why = "it declares a value larger than memory"
        raise UsageError(f"{label}: not a readable Flight Recorder dump ({why})") from None
    admit(doc)
    kept = {k: doc[k] for k in raw if k in doc} if isinstance(doc, dict) else {}
    if kept:
        doc = {k: v for k, v in doc.items() if k not in kept}
    budget = min(MAX_NODES, max(_MIN_NODES, _NODES_PER_BYTE * len(data)))
    plain = documents.check_tree(_plain(doc, budget, label, drop), label)
    return {**plain, **kept} if kept else plain
