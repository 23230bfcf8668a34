"""Hostile input, round 3: Slurm host lists and task counts, Flight Recorder dumps and Pushgateway URLs.

Each table runs as real `python -m clusterbench` processes side by side (real files, real launcher
variables in the environment), and holds every case to the promise: exit 2 (or the documented code), one
line on stderr naming what is wrong, no traceback and no internal error, nothing written. Only the
subprocess timeout bounds the time: a list of a million hosts or a pickle that would build gigabytes
that is not refused at once runs into it.
"""

from __future__ import annotations

import http.server
import os
import pickle
import shutil
import struct
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from beds import free_port
from conftest import run_side_by_side

from clusterbench.errors import UsageError
from clusterbench.flight import dumps
from clusterbench.inputs import hostlist
from clusterbench.publish import pushgateway_url
from clusterbench.runtime.launchers import LAUNCHERS, detect

TIMEOUT_S = 60  # far above a refusal's half second, far below a hang
AT_ONCE = 8
FLIGHT = Path(__file__).parent / "data" / "flight"
SKIP, HEALTHY = FLIGHT / "gloo-2.10-skip", FLIGHT / "gloo-2.10-healthy"


def _plain_env() -> dict[str, str]:
    """This process's environment without any launcher's variables: the test runner may run under one."""
    names = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "CLUSTERBENCH_DEBUG"}
    for entry in LAUNCHERS:
        names |= {entry.rank, entry.size, entry.local_rank, entry.local_size, entry.node}
    return {k: v for k, v in os.environ.items() if k not in names and not k.startswith("SLURM_")}


def _side_by_side(cases: dict[str, tuple[list[str], dict[str, str]]]) -> dict[str, subprocess.CompletedProcess | None]:
    """`python -m clusterbench ARGS` under this environment without a launcher's, plus `ENV`, for each case."""
    return run_side_by_side({name: args for name, (args, _) in cases.items()}, timeout=TIMEOUT_S, at_once=AT_ONCE,
                            envs={name: {**_plain_env(), **env} for name, (_, env) in cases.items()})


def _held_to_the_promise(name: str, proc: subprocess.CompletedProcess | None, code: int,
                         needle: str | tuple[str, ...]) -> str | None:
    """What is wrong with a case's run (`needle`, or each of several, missing from its line or output), or None."""
    if proc is None:
        return f"{name}: ran past {TIMEOUT_S} s"
    err = proc.stderr.strip()
    if proc.returncode != code:
        return f"{name}: exit {proc.returncode}, not {code}: {err[-300:]}"
    if "Traceback" in proc.stdout + proc.stderr or "internal error" in err:
        return f"{name}: {err[-300:]}"
    needles = (needle,) if isinstance(needle, str) else needle
    if code == 2 and (len(err.splitlines()) != 1 or not all(n in err for n in needles)):
        return f"{name}: expected one line with {needles}: {err[-300:]}"
    if code != 2 and not all(n in proc.stdout for n in needles):
        return f"{name}: expected {needles} in what it printed: {proc.stdout[-300:]}"
    return None


Case = tuple[list[str], dict[str, str], int, str | tuple[str, ...]]  # args, environment, exit, what it says


def _run_table(cases: dict[str, Case]) -> dict[str, subprocess.CompletedProcess]:
    ran = _side_by_side({name: (args, env) for name, (args, env, _, _) in cases.items()})
    failures = [why for name, (_, _, code, needle) in cases.items()
                if (why := _held_to_the_promise(name, ran[name], code, needle))]
    assert not failures, "\n".join(failures)
    return ran


# ---- host lists, as functions

@pytest.mark.parametrize("text, hosts", [
    ("localhost", ["localhost"]),
    ("gpu[01-03,07],login1", ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]),
    ("a[8-10]", ["a8", "a9", "a10"]),  # the width of the first number: Slurm's n8 .. n10
    ("a[08-10]", ["a08", "a09", "a10"]),
    ("a[8-010]", ["a8", "a9", "a10"]),  # a wider last number does not pad the first
    ("n[098-100]", ["n098", "n099", "n100"]),
    ("rack[1-2]-gpu[1-2]", ["rack1-gpu1", "rack1-gpu2", "rack2-gpu1", "rack2-gpu2"]),  # the first group outermost
    ("gpu-[03,17].ib", ["gpu-03.ib", "gpu-17.ib"]),
    (" n1,n1 ", ["n1", "n1"]),  # around the list, space is nothing; a name twice stays twice, as in Slurm
    ("[1-2]", ["1", "2"]),
])
def test_good_host_lists_expand_as_slurm_reads_them(text: str, hosts: list[str]) -> None:
    assert hostlist.expand(text) == hosts
    assert hostlist.count(text) == len(hosts)


@pytest.mark.parametrize("text, why", [
    ("n[5-1]", "the range 5-1 runs backwards"),
    ("n[1-3", "a '[' that is never closed"),
    (",,,", "an empty name between commas"),
    ("n1,", "an empty name between commas"),
    ("n[a-b]", "the range 'a-b' is not a number"),
    ("n[1-3]]", "a ']' with no '['"),
    ("n1-3]", "a ']' with no '['"),
    ("", "it names no host"),
    ("  ", "it names no host"),
    ("n[1-[2-3]]", "a '[' inside brackets"),
    ("n[]", "empty brackets"),
    ("n[1,,2]", "an empty range"),
    ("n[-1]", "the range '-1' is not a number"),
    ("n 1", "whitespace inside the name"),
    ("n\x1b[31m[1-2]", "not printable"),
    ("n[" + "9" * 5000 + "]", "more than 18 digits"),
])
def test_a_malformed_host_list_is_named_as_such(text: str, why: str) -> None:
    for read in (hostlist.expand, hostlist.count):
        with pytest.raises(ValueError) as e:
            read(text)
        assert str(e.value).startswith("malformed host list '") and why in str(e.value)


def test_hosts_are_counted_from_the_ranges_and_a_list_past_the_bound_is_never_expanded() -> None:
    assert hostlist.count("n[1-1048576,2000000-2999999]") == 2_048_576
    assert hostlist.count("a[1-99999999999]b[0-99999999999]") == 99_999_999_999 * 100_000_000_000
    assert len(hostlist.expand(f"n[1-{hostlist.MAX_HOSTS}]")) == hostlist.MAX_HOSTS
    for text in (f"n[1-{hostlist.MAX_HOSTS}],m1", "n[1-1048576,3-4]", "a[1-99999999999]b[0-99999999999]"):
        with pytest.raises(ValueError, match=f"more than the {hostlist.MAX_HOSTS}"):
            hostlist.expand(text)


# ---- the launcher's variables, through the CLI

SRUN = {"SLURM_STEP_ID": "0", "SLURM_JOB_ID": "77", "SLURM_PROCID": "1", "SLURM_NTASKS": "2"}
NODELISTS = {
    "backwards": ("n[5-1]", "malformed host list 'n[5-1]': the range 5-1 runs backwards"),
    "unclosed": ("n[1-3", "malformed host list 'n[1-3': a '[' that is never closed"),
    "commas": (",,,", "malformed host list ',,,'"),
    "letters": ("n[a-b]", "malformed host list 'n[a-b]'"),
    "closed twice": ("n[1-3]]", "malformed host list 'n[1-3]]'"),
    "empty": ("", "malformed host list '': it names no host"),
    "nested": ("n[1-[2-3]]", "a '[' inside brackets"),
    "a million hosts": ("n[1-1048576,2-9]", "names 1048584 hosts, more than the 65536"),
    "squares of ranges": ("a[1-65536]b[1-65536]", "names 4294967296 hosts"),
    "5,000 digits": ("n[1-" + "9" * 5000 + "]", "more than 18 digits"),
}
TASKS = {
    "a huge repeat": ("1(x99999999999)", "99999999999 nodes, more than the 65536"),
    "repeats of 5,000 digits": ("1(x" + "9" * 5000 + ")", "counts more tasks or nodes than any job has"),
    "tasks past any job": ("99999999(x2)", "199999998 tasks, more than"),
    "a repeat of nothing": ("2(x0)", "repeats a count on no node"),
    "unclosed": ("8(x2", "'8(x2' is not a task count"),
    "an empty count": ("8(x2),,4", "'' is not a task count"),
    "words": ("eight", "'eight' is not a task count"),
    "empty": ("", "'' is not a task count"),
}


def _launch_refusal(env: dict[str, str]) -> str:
    with pytest.raises(UsageError) as e:
        detect(env)
    return str(e.value)


@pytest.mark.parametrize("name", NODELISTS)
def test_a_slurm_host_list_that_cannot_be_is_named(name: str) -> None:
    text, needle = NODELISTS[name]
    for key in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"):
        line = _launch_refusal({**SRUN, key: text})
        assert line.startswith(f"srun set {key}: ") and needle in line
    # Where MASTER_ADDR says where rank 0 is, the list is still read, and damage still refused.
    assert needle in _launch_refusal({**SRUN, "MASTER_ADDR": "127.0.0.1", "SLURM_STEP_NODELIST": text})


@pytest.mark.parametrize("name", TASKS)
def test_a_slurm_task_count_that_cannot_be_is_named(name: str) -> None:
    text, needle = TASKS[name]
    for key in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        line = _launch_refusal({**SRUN, "SLURM_STEP_NODELIST": "localhost", key: text})
        assert line.startswith(f"srun set {key}=") and needle in line


def test_good_task_counts_plan_each_rank_on_its_node() -> None:
    env = {**SRUN, "MASTER_ADDR": "x", "SLURM_NTASKS": "8200", "SLURM_STEP_NODELIST": "gpu[0001-1025]",
           "SLURM_STEP_TASKS_PER_NODE": "8(x1024),8"}
    joined = detect(env)
    assert [joined.planned_node(r) for r in (0, 7, 8, 8191, 8192, 8199, 8200)] == [
        "gpu0001", "gpu0001", "gpu0002", "gpu1024", "gpu1025", "gpu1025", None]


def test_slurm_variables_that_cannot_be_are_one_line_at_once_through_the_cli(tmp_path: Path) -> None:
    """A few of each table above, as srun would hand them to a real process."""
    cases: dict[str, Case] = {}
    for name in ("backwards", "commas", "empty", "a million hosts"):
        text, needle = NODELISTS[name]
        cases[f"nodelist {name}"] = (["comm", "--out", str(tmp_path / name)], {**SRUN, "SLURM_JOB_NODELIST": text},
                                     2, ("srun set SLURM_JOB_NODELIST: ", needle))
    for name in ("a huge repeat", "unclosed"):
        text, needle = TASKS[name]
        env = {**SRUN, "SLURM_STEP_NODELIST": "localhost", "SLURM_TASKS_PER_NODE": text}
        cases[f"tasks {name}"] = (["comm", "--out", str(tmp_path / name)], env, 2, needle)
    _run_table(cases)
    assert list(tmp_path.iterdir()) == [], "refused before any run folder was claimed"


# ---- Pushgateway URLs, on every command that takes one

BAD_URLS = {
    "unclosed IPv6": ("http://[::1:9091", "the [ of an IPv6 address is never closed"),
    "not IPv6": ("http://[zz]:9091", "[zz] is not an IPv6 address"),
    "empty brackets": ("http://[]:9091", "[] is not an IPv6 address"),
    "a word for a port": ("http://gw:abc", "the port 'abc' is not a number 1 to 65535"),
    "a port past 65535": ("http://gw:99999", "the port '99999'"),
    "port zero": ("http://gw:0", "the port '0'"),
    "no port after the colon": ("http://gw:", "the port ''"),
    "no host": ("http://:9091", "it names no host"),
    "nothing but a scheme": ("https://", "it names no host"),
    "credentials and no host": ("https://user:hunter2@:9091", "https://user:***@:9091: it names no host"),
    "another scheme": ("ftp://gw:21", "speaks http:// or https://"),
    "a query": ("http://gw:9091?job=x", "no ?query or #fragment"),
    "credentials without a scheme": ("user:hunter2@gw:9091", "write https://user:***@gw:9091"),
    "a space": ("http://gw :9091", "whitespace"),
}
# Each command checks its outputs where it starts: the rank commands before torch loads, the others first.
COMMANDS = {"comm": ["comm"], "run": ["run"], "train": ["train"], "fleet": ["fleet"], "info": ["info"],
            "peak": ["peak"], "check": ["check"]}


@pytest.mark.parametrize("name", BAD_URLS)
def test_a_pushgateway_url_that_cannot_be_is_named(name: str) -> None:
    url, needle = BAD_URLS[name]
    with pytest.raises(UsageError, match="^--pushgateway") as e:
        pushgateway_url(url)
    assert needle in str(e.value) and "hunter2" not in str(e.value)


@pytest.mark.parametrize("url, taken", [
    ("gw:9091", "http://gw:9091"),
    ("https://pushgateway.example.org", "https://pushgateway.example.org"),
    ("http://[::1]:9091", "http://[::1]:9091"),
    ("http://[fe80::1%eth0]:9091", "http://[fe80::1%eth0]:9091"),
    ("http://10.0.0.7:9091/behind/a/proxy", "http://10.0.0.7:9091/behind/a/proxy"),
    ("https://user:p@ss@gw:9091", "https://user:p@ss@gw:9091"),  # a password may hold an @, typed as it is
])
def test_a_good_pushgateway_url_is_taken(url: str, taken: str) -> None:
    assert pushgateway_url(url) == taken


def test_a_pushgateway_url_that_cannot_be_is_one_line_on_every_command(tmp_path: Path) -> None:
    cases: dict[str, Case] = {}
    for (command, args), (url, needle) in zip(COMMANDS.items(), BAD_URLS.values()):
        out = [] if command == "check" else ["--out", str(tmp_path / command)]
        cases[f"{command}: {url}"] = ([*args, "--pushgateway", url, *out], {}, 2, needle)
    url, needle = BAD_URLS["credentials without a scheme"]
    cases["comm: credentials without a scheme"] = (["comm", f"--pushgateway={url}", "--out", str(tmp_path / "c")], {},
                                                   2, needle)
    ran = _run_table(cases)
    assert list(tmp_path.iterdir()) == [], "refused before anything was measured or written"
    assert not any("hunter2" in proc.stderr + proc.stdout for proc in ran.values())


class _Gateway(http.server.BaseHTTPRequestHandler):
    """A Pushgateway stand-in that keeps what each push said."""

    pushes: ClassVar[list[tuple[str, str | None]]] = []

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        _Gateway.pushes.append((self.path, self.headers.get("Authorization")))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def gateway() -> Iterator[int]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Gateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()


def test_a_url_with_credentials_is_taken_and_its_password_never_shown(tmp_path: Path, gateway: int) -> None:
    import base64

    nobody = free_port()
    _Gateway.pushes.clear()
    ran = _side_by_side({
        "pushed": (["info", "--store", "off", "--out", str(tmp_path / "pushed"), "--pushgateway",
                    f"http://pusher:hunter2@127.0.0.1:{gateway}"], {}),
        "refused by the gateway's host": (["info", "--store", "off", "--out", str(tmp_path / "failed"),
                                           f"--pushgateway=http://pusher:hunter2@127.0.0.1:{nobody}"], {}),
    })
    for name, proc in ran.items():
        assert proc is not None and proc.returncode == 0, (name, proc and proc.stderr)
        assert "Traceback" not in proc.stderr and "hunter2" not in proc.stdout + proc.stderr, (name, proc.stderr)
    (failure,) = ran["refused by the gateway's host"].stderr.strip().splitlines()
    assert failure.startswith(f"clusterbench: --pushgateway http://pusher:***@127.0.0.1:{nobody}: ") and \
        failure.endswith("(the run's own results are kept)")
    token = base64.b64encode(b"pusher:hunter2").decode()
    assert _Gateway.pushes and all(auth == f"Basic {token}" for _, auth in _Gateway.pushes)
    assert all(path.startswith("/metrics/job/clusterbench/instance/") for path, _ in _Gateway.pushes)
    for folder in ("pushed", "failed"):
        kept = "".join(p.read_text(errors="replace") for p in (tmp_path / folder).rglob("*") if p.is_file())
        assert "hunter2" not in kept and "pusher:***@127.0.0.1" in kept  # run.json's argv, masked


# ---- Flight Recorder dumps

def _torch_dump(rank: int = 0, source: Path = SKIP) -> dict:
    return pickle.loads((source / f"nccl_trace_rank_{rank}").read_bytes())


def _folder(root: Path, name: str, docs: dict[str, bytes | dict]) -> Path:
    """A folder of dumps: the skipping job's three ranks, with files of `docs` written over them or beside."""
    folder = root / name
    shutil.copytree(SKIP, folder)
    for file, doc in docs.items():
        (folder / file).write_bytes(doc if isinstance(doc, bytes) else pickle.dumps(doc, protocol=2))
    return folder


def _with(rank: int, **fields: object) -> dict:
    return {**_torch_dump(rank), **fields}


def _entries(rank: int, **fields: object) -> dict:
    doc = _torch_dump(rank)
    doc["entries"] = [{**e, **fields} for e in doc["entries"]]
    return doc


def _listing(ranks: str, group: str = "0") -> dict:
    """A pg_config listing `group`'s ranks as torch writes them: "[0, 1, 2]"."""
    return {group: {"name": group, "desc": "", "ranks": ranks}}


def _hours_later(rank: int, hours: float) -> dict:
    doc = _torch_dump(rank)
    doc["entries"] = [{**e, "state": "completed", "time_created_ns": e["time_created_ns"] + int(hours * 3.6e12)}
                      for e in doc["entries"]]
    return doc


def _many_entries(count: int) -> bytes:
    """A pickle of `count` small, distinct entries, their text shared through pickle's memo."""
    entry = {"profiling_name": "gloo:all_reduce", "process_group": ("0", "default_pg")}
    return pickle.dumps({"version": "2.10", "entries": [{**entry, "collective_seq_id": i} for i in range(count)]},
                        protocol=2)


def _opcodes(*body: bytes) -> bytes:
    return b"\x80\x02" + b"".join(body) + b"."


def _text(value: str) -> bytes:
    return b"X" + struct.pack("<I", len(value)) + value.encode()


def _references(count: int) -> bytes:
    """A dump whose pg_status is a list of `count` references to one dict, a byte each (DUP)."""
    return _opcodes(b"}(", _text("version"), _text("2.10"), _text("entries"), b"]", _text("pg_status"),
                    b"](}", b"2" * count, b"eu")


def _dump_cases() -> dict[str, tuple[dict[str, bytes | dict], int, str]]:
    """Name -> (files written over the skipping job's dumps or beside them, exit, what the line or output says)."""
    return {
        "a rank past any job in a name": ({"nccl_trace_rank_99999999999": _torch_dump(1)}, 2,
                                          "its name says rank 99999999999, past the"),
        "a rank of 200 digits in a name": ({"nccl_trace_rank_" + "9" * 200: _torch_dump(1)}, 2, "past the"),
        "a million ranks apart": ({"nccl_trace_rank_1048575": _torch_dump(1)}, 1, "no dump from ranks 3-1048574"),
        "more entries than any buffer": ({"nccl_trace_rank_1": _many_entries(dumps.MAX_ENTRIES + 1)}, 2,
                                         f"{dumps.MAX_ENTRIES + 1} entries, more than the {dumps.MAX_ENTRIES}"),
        "millions of references to one value": ({"nccl_trace_rank_1": _references(5_100_000)}, 2,
                                                "unfold into more values"),
        "a memo index of two billion": ({"nccl_trace_rank_1": _opcodes(b"}r", struct.pack("<I", 2**31))}, 2,
                                        "would build more than 1 GiB"),
        "a memo index in text": ({"nccl_trace_rank_1": _opcodes(b"}p", b"9" * 40, b"\n")}, 2, "would build more than"),
        "a flood of sets": ({"nccl_trace_rank_1": b"\x80\x04](" + b"\x8f" * (4 << 20) + b"e."}, 2,
                            "would build more than 1 GiB"),
        "a terabyte of bytes declared": ({"nccl_trace_rank_1": b"\x80\x05\x96" + struct.pack("<Q", 2**40) + b"x."}, 2,
                                         "nccl_trace_rank_1: not a readable Flight Recorder dump"),
        "nested a hundred thousand deep": ({"nccl_trace_rank_1": _opcodes(b"N", b"\x85" * 100_000)}, 2, "nested"),
        "past the size of any dump": ({"nccl_trace_rank_1": b""}, 2, "more than the 32 MiB"),  # made sparse below
        "a listed rank past any job": ({"nccl_trace_rank_1": _with(1, pg_config=_listing("[0, 99999999999]"))}, 2,
                                       "pg_config lists rank 99999999999 in group '0'"),
        "a listed rank of 5,000 digits": ({"nccl_trace_rank_1": _with(1, pg_config=_listing(f"[{'9' * 5000}]"))}, 2,
                                          "pg_config lists a rank of 5000 digits"),
        "a hostname of two lines": ({"nccl_trace_rank_1": _with(1, hostname="node1\nCULPRIT rank 0")}, 2,
                                    "its hostname is not a host name"),
        "a group name of a megabyte": ({"nccl_trace_rank_1": _entries(1, process_group=("0" * 2**20, ""))}, 2,
                                       "is not a name of at most 256"),
        "no entries in any dump": ({f"nccl_trace_rank_{r}": _with(r, entries=[]) for r in range(3)}, 2,
                                   "nothing to judge: none of the 3 dump(s)"),
        "two formats": ({"nccl_trace_rank_2": _with(2, version="2.3")}, 2,
                        "(rank 0's dump is of Flight Recorder format 2.10, rank 2's of 2.3)"),
        "two libraries": ({"nccl_trace_rank_0": _with(0, comm_lib_version="2.21.5"),
                           "nccl_trace_rank_1": _with(1, comm_lib_version="2.27.3")}, 2,
                          "communication library 2.21.5, rank 1's of 2.27.3"),
        "a group described twice": ({"nccl_trace_rank_2": _entries(2, process_group=("0", "tp"))}, 2,
                                    "process group 0 is 'default_pg' in rank 0's dump but 'tp' in rank 2's"),
        "two default groups": ({"nccl_trace_rank_2": _entries(2, process_group=("5", "default_pg"))}, 2,
                               "a job has one"),
        "a group of other members": ({"nccl_trace_rank_0": _with(0, pg_config=_listing("[0, 1]", "1")),
                                      "nccl_trace_rank_2": _with(2, pg_config=_listing("[0, 2]", "1"))}, 2,
                                     "process group 1 holds rank 1 in rank 0's dump, not in rank 2's"),
        "a rank outside the job": ({"nccl_trace_rank_0": _with(0, pg_config=_listing("[0, 1]"))}, 2,
                                   "rank 2 left a dump, but rank 0's lists process group 0"),
        "a completed collective hours apart": ({"nccl_trace_rank_0": _entries(0, state="completed"),
                                                "nccl_trace_rank_2": _hours_later(2, 5)}, 2, "5.0 h apart"),
        # Controls: what was judged keeps its code.
        "judged, found": ({}, 1, "CULPRIT  rank 2 never entered all_reduce #4"),
        "judged, fine": ({f"nccl_trace_rank_{r}": _torch_dump(r, HEALTHY) for r in range(3)}, 0, "verdict: healthy"),
        "completed an hour apart, one job": ({"nccl_trace_rank_0": _entries(0, state="completed"),
                                              "nccl_trace_rank_2": _hours_later(2, 0.5)}, 1, "CULPRIT"),
    }


def test_dumps_that_cannot_be_judged_are_one_line_and_judged_ones_keep_their_code(tmp_path: Path) -> None:
    cases = {}
    for name, (files, code, needle) in _dump_cases().items():
        folder = _folder(tmp_path, name.replace(" ", "-"), files)
        if name == "past the size of any dump":
            os.truncate(folder / "nccl_trace_rank_1", dumps.DUMP_LIMIT + 1)  # sparse: nothing is written
        cases[name] = (["diagnose", str(folder)], {}, code, needle)
    _run_table(cases)


def test_a_folder_of_more_entries_than_are_kept_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dumps, "MAX_FOLDER_ENTRIES", 7)  # the three dumps hold four entries each
    with pytest.raises(UsageError, match="more than 7 entries in its dumps, as far as nccl_trace_rank_1"):
        dumps.read_folder(SKIP)
