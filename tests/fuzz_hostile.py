"""Strategies of round 3's hostile input for the fuzzer (test_fuzz.py): a results store damaged (text no reader
prints in any text column the schema has, a table or a column dropped), a URL with a password given to any
command in any slot a URL could be typed in, a Flight Recorder dump with an entry's field replaced, and an
output option of any command pointed at what is not its own. The columns, the commands and the options come
from the schema and the parsers, so a new one is fuzzed without being listed here."""

from __future__ import annotations

import json
import pickle
import sqlite3
import time
from pathlib import Path
from typing import Any

import fuzz_parsers
from hypothesis import strategies as st
from sqlalchemy import String, Text

from clusterbench.store import schema
from clusterbench.store.db import open_store
from clusterbench.store.record import Figure, RunRecord
from clusterbench.store.where import sqlite

SECRET = "Zq9Secret"  # begins every password drawn: what must never be printed
STORE = "{out}/store.db"
_TABLES = (schema.runs, schema.figures, schema.nodes)
TEXT_COLUMNS = [(t.name, c.name) for t in _TABLES for c in t.columns if isinstance(c.type, (String, Text))]
_UNPRINTABLE = st.characters(categories=["Cc", "Cf", "Zs", "Zl", "Zp"]).filter(lambda c: not c.isprintable())


def write_store(path: Path) -> None:
    """Three daily fleet runs of three nodes, in the rollback journal (a reader that switched it would show)."""
    store = open_store(sqlite(path))
    start = time.time() - 3 * 86400
    nodes = ["n1", "n2", "n3"]
    for day in range(3):
        figures = [Figure(n, "", "node.matmul_tflops", 700.0 + i, "H200 x8") for i, n in enumerate(nodes)]
        store.record(RunRecord(f"run{day}", "fleet", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(start + day * 86400)),
                               None, "complete", "PASS", "n1", f"/runs/{day}", figures, dict.fromkeys(nodes, "PASS")))
    store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")


def store_damage() -> st.SearchStrategy[tuple[str, ...]]:
    """("text", table, column, value) or ("drop", table) or ("dropcol", table, column)."""
    text = st.tuples(st.sampled_from(TEXT_COLUMNS), st.text(max_size=3), _UNPRINTABLE, st.text(max_size=3)).map(
        lambda t: ("text", *t[0], t[1] + t[2] + t[3]))
    drop = st.sampled_from([("drop", t.name) for t in (*_TABLES, schema.meta)])
    column = st.sampled_from([("dropcol", table, column) for table, column in TEXT_COLUMNS])
    return text | drop | column


def damage_store(path: Path, damage: tuple[str, ...]) -> bool:
    """`damage` done to the store at `path`; False where SQLite cannot do it (a column an index holds)."""
    conn = sqlite3.connect(path)
    try:
        if damage[0] == "text":
            conn.execute(f"UPDATE {damage[1]} SET {damage[2]} = ? WHERE rowid = (SELECT max(rowid) FROM {damage[1]})",
                         (damage[3],))
        elif damage[0] == "drop":
            conn.execute(f"DROP TABLE {damage[1]}")
        else:
            conn.execute(f"ALTER TABLE {damage[1]} DROP COLUMN {damage[2]}")
        conn.commit()
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()
    return True


# Commands that only read a store: it must be left as it was, to the byte.
STORE_READERS = (("history",), ("history", "--runs"), ("store", "info"), ("history", "--regressions"),
                 ("history", "--metric", "node.matmul_tflops"), ("baseline", "--from-store", "-o", "{out}/b.json"))


def _slots() -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(command with what it requires, slot) for every command and every slot a URL could be typed in: each
    option of the CLI that takes one (whether this command takes it or not), --OPTION=URL, and a positional."""
    flags = sorted({o.flag for o in fuzz_parsers.options(of="url")})
    found = []
    for words, parser in fuzz_parsers.commands():
        base = (*words, *fuzz_parsers.required(parser))
        found += [(base, (flag,)) for flag in flags] + [(base, (f"{flags[0]}=",)), (words, ())]
    return found


def _escaped(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def url_calls() -> st.SearchStrategy[tuple[str, ...]]:
    """An argv giving a URL with a password (a port no server has: it is refused before anything runs)."""
    password = st.text(st.sampled_from("abcXYZ019 @:/?#%&=+'\"!$-_.~"), max_size=10).map(lambda s: SECRET + s)
    user = st.text(st.sampled_from("abc019._-/%"), min_size=1, max_size=6).filter(lambda s: not s.startswith("/"))
    scheme = st.sampled_from(["postgresql://", "postgres://", "https://", "http://", ""])

    def argv(slot: tuple[tuple[str, ...], tuple[str, ...]], url: str) -> tuple[str, ...]:
        base, where = slot
        url = _escaped(url)
        return (*base, f"{where[0]}{url}") if where and where[0].endswith("=") else (*base, *where, url)

    # Without a scheme, a user part holding a / is a path (a file in a folder): a store of that name is made.
    urls = st.builds(lambda s, u, p: f"{s}{u if s else u.replace('/', '')}:{p}@db.invalid:99999/cb", scheme, user,
                     password.filter(lambda p: not any(c.isspace() for c in p)) | password)
    return st.builds(argv, st.sampled_from(_slots()), urls)


def write_dump(folder: Path, source: Path, field: str, value: Any, as_json: bool) -> None:
    """The dumps of `source` with `field` of rank 1's last entry set to `value`, as a pickle or as JSON."""
    folder.mkdir(parents=True)
    for path in sorted(source.iterdir()):
        doc = pickle.loads(path.read_bytes())  # the repository's own fixtures: trusted
        if path.name.endswith("_1") and doc["entries"]:
            doc["entries"][-1][field] = value
        data = json.dumps(doc, default=str).encode() if as_json else pickle.dumps(doc, protocol=2)
        (folder / path.name).write_bytes(data)


ENTRY_FIELDS = ("profiling_name", "process_group", "collective_seq_id", "p2p_seq_id", "input_sizes", "input_dtypes",
                "output_sizes", "state", "retired", "is_p2p", "time_created_ns", "timeout_ms", "pg_id")
VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8)
                      | st.binary(max_size=4), lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=3), inner, max_size=2), max_leaves=6)


def output_calls() -> st.SearchStrategy[tuple[tuple[str, ...], bool]]:
    """(argv, whether it starts ranks) of an output option, in any of its forms, pointed at what is not its own:
    a FIFO, a link, the user's rules, a run's own run.json."""
    hazards = st.sampled_from(["{out}/pipe", "{out}/link", "{rules}", "{other}/run.json"])

    def argv(option: fuzz_parsers.Option, hazard: str) -> tuple[tuple[str, ...], bool]:
        out = ("--out", "{out}/never") if option.has_out else ()
        return (*option.argv(hazard), *out), option.has_out

    return st.builds(argv, st.sampled_from(fuzz_parsers.options()), hazards)
