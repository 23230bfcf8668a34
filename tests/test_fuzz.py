"""A fuzzer that holds the real CLI to the promise on damaged documents, option values and launcher
environments (issue 18, item 4).

The promise: bad input is one short line on stderr and exit code 2 (1 where a run started and
failed; 0 for good input), never a traceback or a hang, nothing the user had changed, no PASS
without a measurement. Each example builds a fresh folder of good inputs (a GPU run folder made
from fixtures with its telemetry.csv, a baseline, the shipped loss reference, rules, a table of
expected figures, an NCCL log), damages one input (tests/fuzz_documents.py, tests/fuzz_options.py) and runs
`python -m clusterbench` on it, two processes side by side.

CI draws a fixed budget of examples from a fixed seed and does not shrink, to stay within a
minute. By hand, more examples from a new seed, shrunk when they fail:

    CLUSTERBENCH_FUZZ_EXAMPLES=2000 .venv/bin/python -m pytest tests/test_fuzz.py -p no:cacheprovider

(that many examples for every property; --hypothesis-seed=N repeats a run). Each failure found
becomes an entry of REGRESSIONS below, which runs whatever the seed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fuzz_hostile
import pytest
from fuzz_documents import (
    Damage,
    Each,
    Kind,
    Set,
    Token,
    Truncate,
    damage,
    documents_by_name,
    rule_lists,
    rule_values,
)
from fuzz_options import (
    FREE_PORT,
    Launch,
    bad_number,
    bad_output,
    bad_port,
    bad_size,
    bad_size_range,
    bad_words,
    launch_outcome,
    launches,
    numbers,
    outputs,
    size_ranges,
    sizes,
    words,
)
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

BY_HAND = int(os.environ.get("CLUSTERBENCH_FUZZ_EXAMPLES", "0"))
EXITS = {0, 1, 2}
MAX_STDERR_LINES = 2
MAX_LINE = 600  # characters: a path or two and a reason, not a document echoed back
TOOL_TIMEOUT = 20.0  # seconds; these commands answer in under one
RANK_TIMEOUT = 60.0  # seconds; torch alone takes several to import on a busy machine
TOOL_MEMORY = 2 << 30  # bytes of address space: a reader that slurps /dev/zero meets this, not the machine's end
CLAIMED = "already holds a run"  # what a command says of an existing --out once it has taken everything else
# Not passed on: a launcher's variables (a case sets its own) and the switch that shows tracebacks.
SCRUBBED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_", "OMPI_",
            "PMI_", "PMIX_", "MPI_LOCAL", "SLURM_", "CLUSTERBENCH_DEBUG")


def fuzz(examples: int) -> settings:
    """CI: `examples` from a fixed seed, reported as drawn; by hand: CLUSTERBENCH_FUZZ_EXAMPLES, shrunk."""
    return settings(max_examples=BY_HAND or examples, derandomize=not BY_HAND, deadline=None, database=None,
                    phases=(Phase.explicit, Phase.generate, *((Phase.shrink,) if BY_HAND else ())),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.large_base_example, HealthCheck.filter_too_much])


# -- the user's files ------------------------------------------------------------------------------

LOG = "log:nccl-2.29.3-roce-gdrdma-2nodes.log"
FLIGHT_SKIP = Path(__file__).parent / "data" / "flight" / "gloo-2.10-skip"
PLACES = {"run": "run/run.json", "telemetry": "run/telemetry.csv", "baseline": "baseline.json",
          "reference": "reference.json", "rules": "rules.yaml", "expected": "expected.yaml"}
LOG_PLACES = ("run/nccl/nccl.node0.1.log", "logs/nccl.node0.1.log")  # one job's log: a mix of jobs is refused


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


_serial = itertools.count()


def make_case(root: Path, doc: str | None = None, harm: Damage | None = None) -> Path:
    """A fresh folder of good inputs, with document `doc` (a name of documents_by_name) damaged."""
    case = root / f"case{next(_serial)}"
    docs = documents_by_name()
    for place, name in {**{place: name for name, place in PLACES.items()}, **dict.fromkeys(LOG_PLACES, LOG)}.items():
        (case / place).parent.mkdir(parents=True, exist_ok=True)
        (case / place).write_bytes(docs[name].render(None))
    shutil.copytree(case / "run", case / "other", ignore=shutil.ignore_patterns("nccl"))
    (case / "out").mkdir()
    (case / "out" / "link").symlink_to(case / "other" / "run.json")  # a writer told to write here must not follow it
    os.mkfifo(case / "out" / "pipe")
    if doc is not None:
        for place in LOG_PLACES if doc.startswith("log:") else [PLACES[doc]]:
            (case / place).unlink()
            _place(case / place, docs[doc].render(None if isinstance(harm, Kind) else harm), harm)
    return case


def _place(path: Path, data: bytes, harm: Damage | None) -> None:
    kind = harm.kind if isinstance(harm, Kind) else None
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "dangling":
        path.symlink_to(path.parent / "nowhere")
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "loop":
        path.symlink_to(path)
    else:
        path.write_bytes(b"" if kind == "empty" else data)


def _files(case: Path) -> dict[str, str]:
    """Every regular file under `case` (links and special files are not followed), by its hash."""
    found = {}
    for folder, _, names in os.walk(case):
        for name in names:
            path = Path(folder, name)
            if stat.S_ISREG(path.lstat().st_mode):
                found[str(path.relative_to(case))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def places_of(case: Path) -> dict[str, str]:
    """What the {names} of an argv template stand for in a case folder."""
    return {"run": str(case / "run"), "other": str(case / "other"), "out": str(case / "out"),
            "logs": str(case / "logs"), "log": str(case / LOG_PLACES[1]),
            **{name: str(case / place) for name, place in PLACES.items() if not place.startswith("run/")}}


# -- running the CLI and judging what it did -----------------------------------------------------------

@dataclass(frozen=True)
class Call:
    """One command in one case folder, and what it owes beyond the promise every command keeps."""

    case: Path
    argv: tuple[str, ...]  # with {names} of places_of
    env: tuple[tuple[str, str], ...] = ()
    rank: bool = False  # starts torch (and maybe ranks): a longer bound, no memory cap
    must_refuse: bool = False  # its input can never be good: exit 2, and not merely for an existing --out
    exits: frozenset[int] = frozenset(EXITS)
    secret: str = ""  # typed on its command line, and never to be printed

    def words(self) -> list[str]:
        return [a.format(**places_of(self.case)) for a in self.argv]


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUBBED)}
    return {**env, **extra}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_calls(calls: list[Call]) -> list[list[str]]:
    """Run the calls side by side; for each, every way it broke the promise, in words ([]: none)."""
    started = []
    for call in calls:
        before = _files(call.case)
        env = {k: v.replace(FREE_PORT, str(_free_port())) for k, v in call.env}
        proc = subprocess.Popen([sys.executable, "-m", "clusterbench", *call.words()], cwd=call.case,
                                env=_clean_env(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        if not call.rank:  # applied as it starts: it reads no input before its imports, long after this
            resource.prlimit(proc.pid, resource.RLIMIT_AS, (TOOL_MEMORY, TOOL_MEMORY))
        started.append((call, proc, before, time.monotonic()))
    problems: list[list[str]] = []
    for call, proc, before, t0 in started:
        bound = RANK_TIMEOUT if call.rank else TOOL_TIMEOUT
        try:
            out, err = proc.communicate(timeout=max(1.0, bound - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            problems.append([f"{_show(call)}: hung (no answer in {bound:.0f} s)"])
            continue
        found = judge(call, proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"), before)
        problems.append([f"{_show(call)}: {p}" for p in found])
        if not found:
            shutil.rmtree(call.case)  # a failing case stays for a look
    return problems


def _show(call: Call) -> str:
    words = " ".join(w.replace(str(call.case), "CASE") for w in call.words())
    env = "".join(f"{k}={v} " for k, v in call.env)
    return f"[{env}clusterbench {words[:300]}]"


def judge(call: Call, code: int, out: str, err: str, before: dict[str, str]) -> list[str]:
    problems = []
    lines = err.strip().splitlines()
    if "Traceback" in out + err:
        problems.append(f"traceback: {(lines or out.strip().splitlines() or [''])[-1][:200]}")
    if code not in call.exits:
        problems.append(f"exit {code}, expected one of {sorted(call.exits)}: {(lines or [''])[-1][:200]}")
    if len(lines) > MAX_STDERR_LINES:
        problems.append(f"{len(lines)} lines on stderr: {' | '.join(lines[:3])[:300]}")
    if code == 2 and not lines:
        problems.append("exit 2 without a word on stderr")
    if any(len(line) > MAX_LINE for line in lines):
        problems.append(f"a stderr line of {max(map(len, lines))} characters")
    if call.must_refuse and code != 2:
        problems.append(f"took input it must refuse: exit {code}")
    if call.must_refuse and code == 2 and CLAIMED in err:
        problems.append("took input it must refuse (stopped only by --out holding a run)")
    if call.must_refuse and "PASS" in out:
        problems.append("printed PASS over input it must refuse")
    if call.secret and call.secret in out + err:
        problems.append("printed the password it was given")
    if any(not c.isprintable() and c != "\n" for c in out + err):  # a tab, an escape: a forged or garbled line
        problems.append(f"printed {next(repr(c) for c in out + err if not c.isprintable() and c != chr(10))}")
    problems += _verdicts(call, code, out, err)
    after = _files(call.case)
    changed = sorted(p for p, h in before.items() if after.get(p) != h)
    if changed:
        problems.append(f"changed or removed the user's {', '.join(changed[:3])}")
    written = sorted(set(after) - set(before))
    if code == 2 and written:
        problems.append(f"refused, yet wrote {', '.join(written[:3])}")
    return problems


VERDICTS = ("PASS", "WARN", "FAIL", "SKIP", "INFO", "MISSING")


def _verdicts(call: Call, code: int, out: str, err: str) -> list[str]:
    """`compare`'s verdicts: no PASS over nothing measured, a summary no better than its worst line,
    and exit 0 only when something was judged."""
    if call.argv[0] != "compare" or code not in EXITS:
        return []
    try:
        rows = json.loads(out)
        verdicts = [r["verdict"] for r in rows]
        unmeasured = [r["metric"] for r in rows if r["verdict"] == "PASS" and not _measured(r)]
    except (json.JSONDecodeError, TypeError, KeyError):
        rows = [line.split() for line in out.splitlines() if line.split() and line.split()[-1] in VERDICTS]
        verdicts = [row[-1] for row in rows]
        # compare's table: metric, A, B (the run judged), B/A, better, verdict; "-" where B has no value
        unmeasured = [row[0] for row in rows if len(row) == 6 and row[-1] == "PASS" and row[2] == "-"]
    judged = [v for v in verdicts if v in ("PASS", "WARN", "FAIL")]
    problems = [f"PASS for {m}, which has no finite value" for m in unmeasured[:3]]
    summary = next((line for line in (out + "\n" + err).splitlines() if line.startswith(("# compare:", "# rules:"))),
                   "")
    if summary.partition(":")[2].split()[:1] == ["PASS"] and any(v in ("WARN", "FAIL") for v in judged):
        problems.append(f"summary PASS over a {'FAIL' if 'FAIL' in judged else 'WARN'}: {summary[:200]}")
    if code == 0 and not judged:
        problems.append(f"nothing judged, yet exit 0: {summary[:200]}")
    return problems


def _measured(row: dict[str, Any]) -> bool:
    value = row.get("candidate", row.get("value"))
    return isinstance(value, (int, float)) and math.isfinite(value)


def assert_kept(calls: list[Call]) -> None:
    problems = [p for found in run_calls(calls) for p in found]
    assert not problems, "\n".join(problems)


# -- documents ---------------------------------------------------------------------------------------

READERS: dict[str, dict[str, tuple[str, ...]]] = {
    "run": {
        "report": ("report", "{run}"),
        "compare as B": ("compare", "{other}", "{run}", "--all"),
        "compare as A": ("compare", "{run}", "{other}", "--json"),
        "compare rules": ("compare", "{run}", "--rules", "{rules}"),
        "compare rules json": ("compare", "{run}", "--rules", "{rules}", "--json"),
        "compare baseline": ("compare", "{run}", "--baseline", "{baseline}"),
        "baseline": ("baseline", "{other}", "{run}", "-o", "{out}/baseline.json"),
        "align": ("align", "{run}", "--reference", "{reference}"),
        "model fit": ("model", "fit", "{run}", "--sizes", "1K..1G"),
        "model predict": ("model", "predict", "--from", "{run}", "--nodes", "4", "--inter", "ndr"),
        "diagnose": ("diagnose", "{run}"),
    },
    "baseline": {
        "compare": ("compare", "{run}", "--baseline", "{baseline}", "--json"),
        "compare rules": ("compare", "{run}", "--baseline", "{baseline}", "--rules", "{rules}"),
    },
    "reference": {"align": ("align", "{run}", "--reference", "{reference}")},
    "rules": {
        "compare runs": ("compare", "{other}", "{run}", "--rules", "{rules}"),
        "compare run": ("compare", "{run}", "--rules", "{rules}", "--json"),
        "compare baseline": ("compare", "{run}", "--baseline", "{baseline}", "--rules", "{rules}"),
    },
    "telemetry": {"report": ("report", "{run}")},  # a table it cannot read is said in the report, not refused
    "log": {"file": ("diagnose", "{log}"), "folder": ("diagnose", "{logs}"), "run": ("diagnose", "{run}")},
    # `run` reads --expected before any rank starts; --out holds a run, so a good table stops there
    "expected": {"run": ("run", "--expected", "{expected}", "--out", "{other}", "--telemetry-hz", "0")},
}
READERS["baseline"]["run"] = ("run", "--expected", "{baseline}", *READERS["expected"]["run"][3:])
LOGS = sorted(n for n in documents_by_name() if n.startswith("log:"))


def doc_call(root: Path, doc: str, harm: Damage, reader: str) -> Call:
    kind = "log" if doc.startswith("log:") else doc
    return Call(make_case(root, doc, harm), READERS[kind][reader], rank=READERS[kind][reader][0] == "run",
                must_refuse=documents_by_name()[doc].must_refuse(harm))


def _two(kind: str) -> st.SearchStrategy[list[str]]:
    tools = sorted(r for r, argv in READERS[kind].items() if argv[0] != "run")
    return st.lists(st.sampled_from(tools), min_size=2, max_size=2, unique=True)


@fuzz(8)
@given(harm=damage("run"), readers=_two("run"))
def test_a_damaged_run_folder(root: Path, harm: Damage, readers: list[str]) -> None:
    assert_kept([doc_call(root, "run", harm, r) for r in readers])


@fuzz(4)
@given(harm=damage("baseline"), readers=_two("baseline"))
def test_a_damaged_baseline(root: Path, harm: Damage, readers: list[str]) -> None:
    assert_kept([doc_call(root, "baseline", harm, r) for r in readers])


@fuzz(3)
@given(harms=st.lists(damage("reference"), min_size=2, max_size=2))
def test_a_damaged_loss_reference(root: Path, harms: list[Damage]) -> None:
    assert_kept([doc_call(root, "reference", h, "align") for h in harms])


@fuzz(6)
@given(harm=damage("rules") | rule_values() | rule_lists(), readers=_two("rules"))
def test_damaged_rules(root: Path, harm: Damage, readers: list[str]) -> None:
    assert_kept([doc_call(root, "rules", harm, r) for r in readers])


@fuzz(4)
@given(log=st.sampled_from(LOGS).flatmap(lambda n: st.tuples(st.just(n), damage(n))), readers=_two("log"))
def test_a_damaged_nccl_log(root: Path, log: tuple[str, Damage], readers: list[str]) -> None:
    assert_kept([doc_call(root, log[0], log[1], r) for r in readers])


@fuzz(1)
@given(harms=st.lists(damage("telemetry"), min_size=2, max_size=2))
def test_a_damaged_telemetry_table(root: Path, harms: list[Damage]) -> None:
    assert_kept([doc_call(root, "telemetry", h, "report") for h in harms])


@fuzz(1)
@given(harms=st.tuples(damage("expected"), damage("baseline")))
def test_a_damaged_table_of_expected_figures(root: Path, harms: tuple[Damage, Damage]) -> None:
    assert_kept([doc_call(root, "expected", harms[0], "run"), doc_call(root, "baseline", harms[1], "run")])


# -- option values ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Option:
    argv: tuple[str, ...]  # the command with good values for everything else
    option: str
    values: Callable[[], st.SearchStrategy[str]]
    bad: Callable[[str], bool]  # whether no reading of the text is a good value

    @property
    def rank(self) -> bool:
        return self.argv[0] in ("comm", "train", "run")


def _count(text: str) -> bool:
    return bad_number(text, 1, True, whole=True)


PREDICT = ("model", "predict", "--intra", "nvlink4", "--inter", "ndr")
PREDICT_FROM = ("model", "predict", "--from", "{run}", "--inter", "ndr", "--nodes", "2")
ALIGN = ("align", "{run}", "--reference", "{reference}")
COMM = ("comm", "--out", "{other}")  # an existing run: a good value is refused there, after every check
ALGOS = ("native", "ring", "reduce_bcast", "tree", "halving_doubling", "pairwise", "chain", "binomial")
OPS = ("all", "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "gather",
       "scatter", "pt2pt")
OPTIONS = {
    "compare --tolerance": Option(("compare", "{other}", "{run}"), "--tolerance", numbers,
                                  lambda t: bad_number(t, 0, True)),
    "align --mre-limit": Option(ALIGN, "--mre-limit", numbers, lambda t: bad_number(t, 0, False)),
    "align --variance-limit": Option(ALIGN, "--variance-limit", numbers, lambda t: bad_number(t, 0, True)),
    "predict --nodes": Option((*PREDICT, "--gpus-per-node", "8"), "--nodes", numbers, _count),
    "predict --gpus-per-node": Option((*PREDICT, "--nodes", "2"), "--gpus-per-node", numbers, _count),
    "predict --from --gpus-per-node": Option(PREDICT_FROM, "--gpus-per-node", numbers, _count),
    "predict --sizes": Option((*PREDICT, "--nodes", "2", "--gpus-per-node", "8"), "--sizes", size_ranges,
                              bad_size_range),
    "predict --op": Option((*PREDICT, "--nodes", "2", "--gpus-per-node", "8"), "--op", lambda: words(OPS),
                           lambda t: False),
    "predict --plot": Option(PREDICT_FROM, "--plot", outputs, bad_output),
    "fit --sizes": Option(("model", "fit", "{run}"), "--sizes", size_ranges, bad_size_range),
    "baseline --output": Option(("baseline", "{run}", "{other}"), "--output", outputs, bad_output),
}
RANK_OPTIONS = {
    "comm --algo": Option(COMM, "--algo", lambda: words(ALGOS), lambda t: bad_words(t, ALGOS)),
    "comm --ops": Option(COMM, "--ops", lambda: words(OPS), lambda t: bad_words(t, OPS)),
    "comm --min-bytes": Option(COMM, "--min-bytes", sizes, bad_size),
    "comm --max-bytes": Option(COMM, "--max-bytes", sizes, bad_size),
    "comm --step-factor": Option(COMM, "--step-factor", numbers, lambda t: bad_number(t, 1, False)),
    "comm --iters": Option(COMM, "--iters", numbers, lambda t: t.strip().lower() != "auto" and _count(t)),
    "comm --root": Option(COMM, "--root", numbers, lambda t: bad_number(t, 0, True, whole=True)),
    "comm --time-budget": Option(COMM, "--time-budget", numbers, lambda t: bad_number(t, 0, False)),
    "comm --timeout": Option(COMM, "--timeout", numbers, lambda t: bad_number(t, 0, False)),
    "comm --flag-below": Option(COMM, "--flag-below", numbers, lambda t: bad_number(t, 0, False)),
    "comm --nproc": Option(COMM, "--nproc", numbers, _count),
    "comm --master-port": Option(COMM, "--master-port", numbers, bad_port),
    "comm --telemetry-hz": Option(COMM, "--telemetry-hz", numbers, lambda t: bad_number(t, 0, True)),
}


def option_call(root: Path, name: str, value: str) -> Call:
    """`value` given to option `name`; only a path of `outputs` names a place ({run}), other braces are text."""
    option = {**OPTIONS, **RANK_OPTIONS}[name]
    text = value if option.values is outputs else value.replace("{", "{{").replace("}", "}}")
    return Call(make_case(root), (*option.argv, f"{option.option}={text}"), rank=option.rank,
                must_refuse=option.bad(value))


def _picks(options: dict[str, Option]) -> st.SearchStrategy[list[tuple[str, str]]]:
    pick = st.sampled_from(sorted(options)).flatmap(lambda n: st.tuples(st.just(n), options[n].values()))
    return st.lists(pick, min_size=2, max_size=2)


@fuzz(7)
@given(picks=_picks(OPTIONS))
def test_option_values(root: Path, picks: list[tuple[str, str]]) -> None:
    assert_kept([option_call(root, name, value) for name, value in picks])


@fuzz(2)
@given(picks=_picks(RANK_OPTIONS))
def test_option_values_of_a_rank_command(root: Path, picks: list[tuple[str, str]]) -> None:
    assert_kept([option_call(root, name, value) for name, value in picks])


# -- launcher environments ------------------------------------------------------------------------------

LAUNCHED = ("comm", "-e", "8", "--iters", "1", "--warmup", "1", "--timeout", "5", "--telemetry-hz", "0",
            "--out", "{out}/comm")


def launch_call(root: Path, launch: Launch) -> Call:
    outcome = launch_outcome(launch)
    exits = {"refuse": {2}, "run": {0, 1}}.get(outcome, EXITS)
    return Call(make_case(root), LAUNCHED, env=launch.variables, rank=True, must_refuse=outcome == "refuse",
                exits=frozenset(exits))


@fuzz(2)
@given(picks=st.lists(launches().filter(lambda launch: launch_outcome(launch) != "wait"), min_size=2, max_size=2))
def test_launcher_environments(root: Path, picks: list[Launch]) -> None:
    assert_kept([launch_call(root, launch) for launch in picks])


# -- round 3: stores, URLs with passwords, dumps, outputs over what is not their own (fuzz_hostile.py) ----

@fuzz(4)
@given(damage=fuzz_hostile.store_damage(), readers=st.lists(st.sampled_from(fuzz_hostile.STORE_READERS), min_size=2,
                                                            max_size=2))
def test_a_damaged_store(root: Path, damage: tuple[str, ...], readers: list[tuple[str, ...]]) -> None:
    calls = []
    for reader in readers:
        case = make_case(root)
        fuzz_hostile.write_store(case / "out" / "store.db")
        assume(fuzz_hostile.damage_store(case / "out" / "store.db", damage))
        calls.append(Call(case, (*reader, "--store", fuzz_hostile.STORE), must_refuse=damage[0] != "text"))
    assert_kept(calls)


@fuzz(4)
@given(argvs=st.lists(fuzz_hostile.url_calls(), min_size=2, max_size=2))
def test_a_password_in_any_slot_of_any_command(root: Path, argvs: list[tuple[str, ...]]) -> None:
    assert_kept([Call(make_case(root), argv, rank=True, secret=fuzz_hostile.SECRET, exits=frozenset({1, 2}))
                 for argv in argvs])


@fuzz(3)
@given(field=st.sampled_from(fuzz_hostile.ENTRY_FIELDS), values=st.lists(fuzz_hostile.VALUES, min_size=2, max_size=2),
       as_json=st.booleans())
def test_a_damaged_flight_recorder_dump(root: Path, field: str, values: list[Any], as_json: bool) -> None:
    calls = []
    for value in values:
        case = make_case(root)
        fuzz_hostile.write_dump(case / "dumps", FLIGHT_SKIP, field, value, as_json)
        calls.append(Call(case, ("diagnose", str(case / "dumps"))))
    assert_kept(calls)


@fuzz(3)
@given(picks=st.lists(fuzz_hostile.output_calls(), min_size=2, max_size=2))
def test_an_output_over_what_is_not_its_own(root: Path, picks: list[tuple[tuple[str, ...], bool]]) -> None:
    assert_kept([Call(make_case(root), argv, rank=rank, must_refuse=True) for argv, rank in picks])


# -- the footing, and what the fuzzer found, kept whatever the seed --------------------------------------

def test_every_reader_takes_the_good_inputs(root: Path) -> None:
    """Were the undamaged inputs refused, every damage would pass as refused: each reader must take them."""
    argvs = [*READERS["run"].values(), READERS["log"]["file"], READERS["rules"]["compare runs"]]
    calls = [Call(make_case(root), argv, exits=frozenset({0})) for argv in argvs]
    problems = [p for start in range(0, len(calls), 2) for found in run_calls(calls[start:start + 2]) for p in found]
    assert not problems, "\n".join(problems)


REGRESSIONS: dict[str, Callable[[Path], Call]] = {
    "compare --rules, rules nested 100,000 deep (RecursionError)":
        lambda root: doc_call(root, "rules", Set((), Token("deep[")), "compare baseline"),
    "compare --rules, rules.yaml a link to /dev/zero (MemoryError)":
        lambda root: doc_call(root, "rules", Kind("zero"), "compare run"),
    "baseline -o its own input's run.json (replaced it)":
        lambda root: option_call(root, "baseline --output", "{run}/run.json"),
    "baseline -o the user's rules.yaml (replaced it)": lambda root: option_call(root, "baseline --output", "{rules}"),
    "model predict --plot the user's reference.json (replaced it with an SVG)":
        lambda root: option_call(root, "predict --plot", "{reference}"),
    "align, the run's train.config.task 2 MB long (echoed in one 2 MB line)":
        lambda root: doc_call(root, "run", Set(("train", "config", "task"), Token("huge")), "align"),
    "align, the reference's task 2 MB long (echoed in one 2 MB line)":
        lambda root: doc_call(root, "reference", Set(("task",), Token("huge")), "align"),
    "report, every comm busbw 1e300 (6 lines of numpy overflow warnings)":
        lambda root: doc_call(root, "run", Each(("comm",), "busbw_gbps", 1e300), "report"),
    "report, telemetry.csv empty (8 lines of matplotlib warnings)":
        lambda root: doc_call(root, "telemetry", Truncate(0), "report"),
    "report, telemetry.csv only its header (8 lines of matplotlib warnings)":
        lambda root: doc_call(root, "telemetry", Truncate(194), "report"),
    "torchrun's LOCAL_RANK past WORLD_SIZE (refused; the fuzzer had taken it for good)":
        lambda root: launch_call(root, Launch("torchrun", (
        ("LOCAL_RANK", "99999999999999999999"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", FREE_PORT),
        ("RANK", "0"), ("TORCHELASTIC_RUN_ID", "fuzz"), ("WORLD_SIZE", "1")))),
}


@pytest.fixture(scope="module")
def regressions(root: Path) -> dict[str, list[str]]:
    """Every regression case, run two at a time: what each broke."""
    names = sorted(REGRESSIONS)
    found: dict[str, list[str]] = {}
    for pair in (names[i:i + 2] for i in range(0, len(names), 2)):
        found.update(zip(pair, run_calls([REGRESSIONS[name](root) for name in pair])))
    return found


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_regression(regressions: dict[str, list[str]], name: str) -> None:
    assert not regressions[name], "\n".join(regressions[name])
