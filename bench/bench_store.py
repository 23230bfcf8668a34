"""The results store's two targets (issue 20), measured: "recording a run adds under 1 s to it" and
"on SQLite, history questions over 10,000 runs x 100 nodes answer in under 2 s".

1. Recording. (a) A real small run, `clusterbench comm --nproc 2 -e 64K`, with `--store off`, into a
   small store and into a copy of the big store below, alternating, --reps of each: the medians
   and their differences. (b) In a fresh interpreter each time, as a run ends: the import of
   clusterbench.publish (and recording), `record_of(run, folder)` of a real run folder, and
   `publish.publish(record, outputs)`, SQLAlchemy's first import included, into a store that does
   not exist yet, a small one and the big one; then a second record in the same process (warm), and a
   fleet-shaped record (--nodes nodes x 6 figures) the same ways.
2. History. An SQLite store of --runs fleet runs of --nodes nodes over a year (`gpu-001`...; the
   last few nodes another hardware class; each node's node.* figures with noise, some degraded
   nodes; the job's comm figures under `gpu-[001-100]`), inserted through the store's own tables and
   indexes (SQLAlchemy Core, executemany in one transaction) and cached under the temp dir by schema
   version and size. Then each history question as a user asks it: the CLI's wall time (median of
   --rounds alternating rounds), and its time in one warm process (imports done: the query and the
   analysis only), against the 2 s target.

    python bench/bench_store.py [--runs 10000] [--nodes 100] [--reps 5] [--rounds 3]
    python bench/bench_store.py --skip-recording --explain --profile     # why a question is slow

--explain prints each SQL statement the questions ran, its time alone (sqlite3, rows fetched) and
SQLite's plan; --profile prints each question's cProfile top functions.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import random
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_RECORD_S = 1.0
TARGET_HISTORY_S = 2.0
GENERATOR = 3  # bump when the synthetic history changes: the cached store is rebuilt
MAIN_CLASS = "NVIDIA H100 80GB HBM3 x8"
OTHER_CLASS = "NVIDIA H200 x8"
DAY = 86400.0

# Each node's own figures (a fleet run's NodeRow.metrics, stored as node.<name>): class median, per-run noise.
NODE_FIGURES = {
    "matmul_tflops": ({MAIN_CLASS: 712.0, OTHER_CLASS: 748.0}, 0.015),
    "copy_gbps": ({MAIN_CLASS: 2650.0, OTHER_CLASS: 3920.0}, 0.02),
    "intra_busbw_gbps": ({MAIN_CLASS: 3380.0, OTHER_CLASS: 3420.0}, 0.02),
    "send_gbps": ({MAIN_CLASS: 368.0, OTHER_CLASS: 371.0}, 0.03),
    "recv_gbps": ({MAIN_CLASS: 366.0, OTHER_CLASS: 370.0}, 0.03),
    "latency_us": ({MAIN_CLASS: 4.8, OTHER_CLASS: 4.7}, 0.08),
}
# The job's own figures (comm over all nodes), under the job's host list.
JOB_FIGURES = {
    "comm.all_reduce.busbw_gbps.top": 3620.0, "comm.all_reduce.busbw_gbps.avg": 1410.0,
    "comm.all_reduce.busbw_gbps.medium": 1890.0, "comm.all_reduce.busbw_gbps.small": 21.0,
    "comm.all_gather.busbw_gbps.top": 3480.0, "comm.reduce_scatter.busbw_gbps.top": 3510.0,
    "comm.all_reduce.wrong": 0.0, "comm.wrong": 0.0,
}


# ---------------------------------------------------------------------------------------------------------------
# The synthetic history


def node_names(n: int) -> list[str]:
    return [f"gpu-{i:03d}" for i in range(1, n + 1)]


def _degraded(node: str, back: int, day: float, rng: random.Random) -> tuple[dict[str, float], str | None]:
    """A few nodes' troubles: (factor per figure, verdict). back: runs before the newest (0: the newest); day:
    days before it. What fell in the last run or two is what `history --regressions` should find."""
    if node == "gpu-013" and back < 2:
        return {"matmul_tflops": 0.85}, "SUSPECT"  # thermal: its matmul fell 15 %
    if node == "gpu-042" and back < 1:
        return {"copy_gbps": 0.87}, "SUSPECT"  # memory clocks down
    if node == "gpu-077" and (150 < day < 180 or back < 1):
        return {"send_gbps": 0.55, "recv_gbps": 0.55}, "EXCLUDE"  # a bad cable, replaced; bad again now
    if node == "gpu-058" and back < 2:
        return {"latency_us": 2.5}, "SUSPECT"
    if node == "gpu-091" and rng.random() < 0.05:
        return {"matmul_tflops": 0.7}, "SUSPECT"  # a straggler now and then
    if node == "gpu-023" and 40 < day < 50:
        return {}, "EXCLUDE"  # dead for ten days: silent, no figures
    return {}, None


def build_history(path: Path, n_runs: int, n_nodes: int, seed: int = 20) -> float:
    """Write the store at `path` through its own schema; the seconds it took."""
    from sqlalchemy import insert

    from clusterbench.inputs import hostlist
    from clusterbench.store import schema
    from clusterbench.store.db import open_store
    from clusterbench.store.where import sqlite

    t0 = time.perf_counter()
    rng = random.Random(seed)
    nodes = node_names(n_nodes)
    klass = {n: OTHER_CLASS if i >= n_nodes - max(1, n_nodes // 25) else MAIN_CLASS for i, n in enumerate(nodes)}
    own = {(n, f): rng.gauss(1.0, 0.01) for n in nodes for f in NODE_FIGURES}  # each node's own lot
    job = hostlist.compress(nodes)
    end = time.time() - 600.0
    step = 365.0 * DAY / n_runs
    store = open_store(sqlite(path))
    try:
        with store.writing() as conn:
            conn.exec_driver_sql("PRAGMA cache_size=-524288")  # 512 MiB for the build; the store's own is default
            batch = max(1, 60_000 // (n_nodes * (len(NODE_FIGURES) + 1)))
            for first in range(0, n_runs, batch):
                run_rows, node_rows, figure_rows = [], [], []
                for i in range(first, min(first + batch, n_runs)):
                    started = end - (n_runs - i) * step + rng.uniform(0, step / 2)
                    day = (end - started) / DAY
                    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
                    started = float(int(started))
                    upgrade = 1.03 if day < 165 else 1.0  # a driver upgrade half a year ago: matmul +3 %
                    failed = rng.random() < 0.01
                    verdicts = {}
                    for n in nodes:  # as db._insert writes them (a failed job has no fleet rows, so no node rows)
                        factors, verdict = ({}, "FAIL") if failed else _degraded(n, n_runs - 1 - i, day, rng)
                        verdicts[n] = verdict or "PASS"
                        if failed:
                            continue
                        node_rows.append({"run_id": i + 1, "node": n, "klass": klass[n], "verdict": verdicts[n]})
                        if verdict == "EXCLUDE" and not factors:
                            continue
                        for f, (median, noise) in NODE_FIGURES.items():
                            value = median[klass[n]] * own[(n, f)] * rng.gauss(1.0, noise) * factors.get(f, 1.0)
                            if f == "matmul_tflops":
                                value *= upgrade
                            figure_rows.append({"run_id": i + 1, "started_s": started, "node": n, "device": "",
                                                "metric": "node." + f, "value": value, "klass": klass[n]})
                    worst = set(verdicts.values())
                    verdict = "FAIL" if worst & {"FAIL", "EXCLUDE"} else "WARN" if "SUSPECT" in worst else "PASS"
                    if not failed:  # the job's figures, under its host list (which has no row in nodes)
                        slow = 0.93 if "EXCLUDE" in worst else 1.0
                        for metric, median in JOB_FIGURES.items():
                            value = median * rng.gauss(1.0, 0.02) * slow if median else 0.0
                            figure_rows.append({"run_id": i + 1, "started_s": started, "node": job, "device": "",
                                                "metric": metric, "value": value, "klass": MAIN_CLASS})
                    finished = started + rng.uniform(900, 1800)
                    run_rows.append({
                        "id": i + 1, "uid": uuid.UUID(int=rng.getrandbits(128)).hex, "command": "run",
                        "started_utc": stamp, "started_s": started,
                        "finished_utc": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(finished)),
                        "status": "failed" if failed else "complete", "verdict": None if failed else verdict,
                        "host": nodes[0], "folder": f"/shared/clusterbench/runs/{stamp}",
                        "reason": "rank 17 (gpu-003) died: NCCL watchdog timeout" if failed else None,
                        "recorded_s": finished})
                conn.execute(insert(schema.runs), run_rows)
                conn.execute(insert(schema.nodes), node_rows)
                conn.execute(insert(schema.figures), figure_rows)
    finally:
        store.close()
    return time.perf_counter() - t0


def cached_history(n_runs: int, n_nodes: int, rebuild: bool) -> tuple[Path, float | None]:
    """The big store, built once per schema version and size; (path, seconds building took or None)."""
    from clusterbench.store.schema import SCHEMA_VERSION

    folder = Path(tempfile.gettempdir()) / "clusterbench-bench-store"
    folder.mkdir(exist_ok=True)
    path = folder / f"history-schema{SCHEMA_VERSION}-gen{GENERATOR}-{n_runs}runs-{n_nodes}nodes.db"
    if path.exists() and not rebuild:
        with sqlite3.connect(path) as conn:  # its windows (--since 30d) are relative to now: at most a day old
            newest = conn.execute("SELECT MAX(started_s) FROM runs").fetchone()[0]
        if newest is not None and time.time() - newest < DAY:
            return path, None
    for old in folder.glob(path.name + "*"):
        old.unlink()
    return path, build_history(path, n_runs, n_nodes)


# ---------------------------------------------------------------------------------------------------------------
# Child processes: each measured in an interpreter of its own, as a run's own process ends


def fleet_record(n_nodes: int) -> object:
    """A fleet run's record as recording.record_of makes it: each node's 6 figures and verdict, the job's figures."""
    from clusterbench.inputs import hostlist
    from clusterbench.store.record import Figure, RunRecord

    rng = random.Random()
    nodes = node_names(n_nodes)
    figures = [Figure(hostlist.compress(nodes), "", m, v, MAIN_CLASS) for m, v in JOB_FIGURES.items()]
    for n in nodes:
        figures += [Figure(n, "", "node." + f, median[MAIN_CLASS] * rng.gauss(1, noise), MAIN_CLASS)
                    for f, (median, noise) in NODE_FIGURES.items()]
    now = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return RunRecord(uuid.uuid4().hex, "fleet", now, now, "complete", "PASS", nodes[0], "/tmp/fleet-run", figures,
                     {n: "PASS" for n in nodes}, None, {n: MAIN_CLASS for n in nodes})


def child_publish(kind: str, source: str, store: str) -> dict[str, float]:
    """Seconds of the first publish of a run in this interpreter (imports included) and of a second one."""
    from dataclasses import replace

    from clusterbench.store.where import sqlite

    outputs_store = sqlite(Path(store))
    if kind == "folder":
        from clusterbench.stages.registry import load_run  # the harness has the run in hand as it ends

        run = load_run(source)
        t0 = time.perf_counter()
        from clusterbench import publish
        from clusterbench.publish.recording import record_of

        record = replace(record_of(run, source), uid=uuid.uuid4().hex)
    else:
        record = fleet_record(int(source))
        t0 = time.perf_counter()
        from clusterbench import publish
    outputs = publish.Outputs(store=outputs_store)
    if not publish.publish(record, outputs, say=None):
        raise SystemExit("publish failed")
    cold = time.perf_counter() - t0
    t1 = time.perf_counter()
    if not publish.publish(replace(record, uid=uuid.uuid4().hex), outputs, say=None):
        raise SystemExit("publish failed")
    warm = time.perf_counter() - t1
    from clusterbench.store.db import open_store  # its parts, warm

    t2 = time.perf_counter()
    s = open_store(outputs_store)
    t3 = time.perf_counter()
    s.record(replace(record, uid=uuid.uuid4().hex))
    t4 = time.perf_counter()
    s.close()
    return {"cold": cold, "warm": warm, "open": t3 - t2, "record": t4 - t3, "close": time.perf_counter() - t4,
            "figures": len(record.figures)}


def child_import() -> dict[str, float]:
    """Seconds of SQLAlchemy's first import, as publish pays it (clusterbench.store.db)."""
    import clusterbench.publish  # the harness has it already

    t0 = time.perf_counter()
    import clusterbench.store.db  # noqa: F401

    return {"import": time.perf_counter() - t0}


class _Statements:
    """The SQL statements an engine runs, with their parameters (for --explain)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, object]] = []

    def __call__(self, conn: object, cursor: object, statement: str, parameters: object, *rest: object) -> None:
        if not statement.lstrip().upper().startswith(("PRAGMA", "BEGIN", "COMMIT", "ROLLBACK")):
            self.seen.append((statement, parameters))


def child_queries(questions: dict[str, list[str]], rounds: int, explain: str | None, profile: bool) -> dict:
    """Each question in this warm process: its first call (lazy imports), then the median of `rounds`."""
    from sqlalchemy import Engine, event

    from clusterbench.cli import main

    statements = _Statements()
    if explain:
        event.listen(Engine, "before_cursor_execute", statements)
    found: dict[str, dict] = {}
    for name, argv in questions.items():
        sink = io.StringIO()
        first_at = time.perf_counter()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            code = main(argv)
        first = time.perf_counter() - first_at
        if code not in (0, 1):
            raise SystemExit(f"{name}: exit {code}: {sink.getvalue()[-2000:]}")
        statements.seen.clear()
        times, cpu = [], []
        for r in range(rounds):
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                t0, c0 = time.perf_counter(), time.process_time()
                main(argv)
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            if r == 0:
                ran = list(statements.seen)
        entry: dict = {"first": first, "median": statistics.median(times), "cpu": statistics.median(cpu), "code": code,
                       "said": sink.getvalue().splitlines()[:3]}
        if explain:
            entry["sql"] = _explained(ran, explain)
        if profile:
            prof = cProfile.Profile()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                prof.runcall(main, argv)
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(14)
            entry["profile"] = text.getvalue()
        found[name] = entry
    return found


def _explained(ran: list[tuple[str, object]], db: str) -> list[dict]:
    """Each distinct statement run once more on a bare sqlite3 connection: its rows, seconds and plan."""
    out, done = [], set()
    conn = sqlite3.connect(db)
    try:
        for statement, params in ran:
            key = (statement, repr(params))
            if key in done:
                continue
            done.add(key)
            args = params if isinstance(params, (tuple, list, dict)) else ()
            t0 = time.perf_counter()
            rows = len(conn.execute(statement, args).fetchall())
            seconds = time.perf_counter() - t0
            plan = [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + statement, args)]
            out.append({"sql": " ".join(statement.split()), "params": repr(params)[:200], "rows": rows,
                        "seconds": seconds, "plan": plan})
    finally:
        conn.close()
    return out


def _child(argv: list[str]) -> None:
    kind = argv[0]
    if kind == "publish":
        result = child_publish(argv[1], argv[2], argv[3])
    elif kind == "import":
        result = child_import()
    else:
        spec = json.loads(argv[1])
        result = child_queries(spec["questions"], spec["rounds"], spec["explain"], spec["profile"])
    print("RESULT " + json.dumps(result))


def _in_child(*argv: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", *argv], check=False, capture_output=True, text=True,
                          cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"child {argv[0]} failed: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.split("RESULT ", 1)[1])


# ---------------------------------------------------------------------------------------------------------------
# The measurements


def _cli() -> list[str]:
    exe = Path(sys.executable).parent / "clusterbench"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "clusterbench"]


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _timed(argv: list[str], ok: tuple[int, ...] = (0,)) -> tuple[float, float]:
    """(wall, CPU) seconds of one command; the CPU seconds of it and its children (its ranks)."""
    cpu, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(argv, check=False, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr[-2000:]}")
    return wall, _children_cpu() - cpu


def _copy(big: Path, where: Path) -> Path:
    shutil.copyfile(big, where)
    return where


def recording(a: argparse.Namespace, big: Path, tmp: Path) -> None:
    cli = _cli()
    folder = tmp / "run"
    small, copy = tmp / "small.db", _copy(big, tmp / "big.db")
    arms = {"--store off": "off", "--store small.db": str(small), "--store big.db (copy of the history)": str(copy)}
    walls: dict[str, list[tuple[float, float]]] = {arm: [] for arm in arms}
    if not a.skip_runs:
        comm = [*cli, "comm", "--nproc", "2", "-e", "64K", "--out", str(folder), "--overwrite"]
        _timed([*comm, "--store", str(small)])  # warm the file cache; the small store holds one run from here on
        print(f"\n## 1a. Wall of `clusterbench comm --nproc 2 -e 64K`, {a.reps} alternating rounds", flush=True)
        for r in range(a.reps):
            order = list(arms.items()) if r % 2 == 0 else list(arms.items())[::-1]
            for arm, store in order:
                walls[arm].append(_timed([*comm, "--store", store]))
        off = statistics.median(w for w, _ in walls["--store off"])
        off_cpu = statistics.median(c for _, c in walls["--store off"])
        print(f"{'store':<40} {'wall s':>7} {'min':>6} {'max':>6} {'- off':>6} {'CPU s':>6} {'- off':>6}")
        for arm, got in walls.items():
            ts, cpu = [w for w, _ in got], statistics.median(c for _, c in got)
            med = statistics.median(ts)
            print(f"{arm:<40} {med:7.2f} {min(ts):6.2f} {max(ts):6.2f} {med - off:+6.2f} {cpu:6.2f} {cpu - off_cpu:+6.2f}")
    else:
        _timed([*cli, "comm", "--nproc", "2", "-e", "64K", "--out", str(folder), "--overwrite", "--store", str(small)])
    print(f"\n## 1b. publish(record_of(run, folder), outputs) in a fresh interpreter, median of {a.reps}", flush=True)
    print("cold: from the import of clusterbench.publish to done (SQLAlchemy's first import included); "
          "warm: a second run recorded in the same process (open + record + close)")
    imports = [_in_child("import")["import"] for _ in range(a.reps)]
    print(f"import of clusterbench.store.db (SQLAlchemy) alone: median {statistics.median(imports):.3f} s")
    print(f"{'record':<22} {'store':<30} {'figures':>7} {'cold s':>7} {'warm s':>7} {'open':>6} {'record':>7} "
          f"{'close':>6}  < {TARGET_RECORD_S:g} s")
    cases = [("comm run folder", "folder", str(folder)), (f"fleet {a.nodes} nodes", "fleet", str(a.nodes))]
    for label, kind, source in cases:
        for store_label, store in [("new (no file yet)", None), ("small", tmp / "small.db"),
                                   (f"history ({a.runs} runs)", copy)]:
            got = []
            for i in range(a.reps):
                path = store or tmp / f"new-{kind}-{i}.db"
                got.append(_in_child("publish", kind, source, str(path)))
            med = {k: statistics.median(g[k] for g in got) for k in got[0]}
            print(f"{label:<22} {store_label:<30} {int(med['figures']):>7} {med['cold']:7.3f} {med['warm']:7.3f} "
                  f"{med['open']:6.3f} {med['record']:7.3f} {med['close']:6.3f}  "
                  f"{'yes' if med['cold'] < TARGET_RECORD_S else 'NO'}", flush=True)


def questions(db: Path, out: Path, n_nodes: int) -> dict[str, list[str]]:
    s = ["--store", str(db)]
    node = node_names(n_nodes)[min(41, n_nodes - 1)]
    return {
        "history": ["history", *s],
        f"history --node {node} --metric node.matmul_tflops --since 365d":
            ["history", *s, "--node", node, "--metric", "node.matmul_tflops", "--since", "365d"],
        "history --metric node.matmul_tflops --since 30d": ["history", *s, "--metric", "node.matmul_tflops",
                                                            "--since", "30d"],
        "history --metric node.matmul_tflops --since 365d": ["history", *s, "--metric", "node.matmul_tflops",
                                                             "--since", "365d"],
        "history --regressions --since 30d": ["history", *s, "--regressions", "--since", "30d"],
        "history --report out.html --since 30d": ["history", *s, "--report", str(out / "out.html"), "--overwrite",
                                                  "--since", "30d"],
        "store info": ["store", "info", *s],
        "baseline --from-store --since 30d": ["baseline", "--from-store", *s, "--since", "30d", "--class",
                                              MAIN_CLASS, "-o", str(out / "x.json"), "--overwrite"],
    }


def history_questions(a: argparse.Namespace, big: Path, tmp: Path) -> None:
    asked = questions(big, tmp, a.nodes)
    cli = _cli()
    walls: dict[str, list[tuple[float, float]]] = {name: [] for name in asked}
    print(f"\n## 2. History over {a.runs} runs x {a.nodes} nodes: CLI wall (median of {a.rounds} alternating "
          f"rounds) and in one warm process (median of {a.rounds})", flush=True)
    for name, argv in asked.items():  # warm the page cache
        _timed([*cli, *argv], ok=(0, 1))
    for r in range(a.rounds):
        for name, argv in (list(asked.items()) if r % 2 == 0 else list(asked.items())[::-1]):
            walls[name].append(_timed([*cli, *argv], ok=(0, 1)))
    spec = {"questions": asked, "rounds": a.rounds, "explain": str(big) if a.explain else None,
            "profile": a.profile}
    inside = _in_child("queries", json.dumps(spec))
    print("CLI: the command as a user runs it (wall, and its CPU seconds); in-process: the same call again in one "
          "warm process (imports done), wall and CPU")
    print(f"{'question':<62} {'CLI s':>6} {'CPU s':>6} {'in-proc s':>9} {'CPU s':>6}  < {TARGET_HISTORY_S:g} s")
    for name in asked:
        wall = statistics.median(w for w, _ in walls[name])
        cpu = statistics.median(c for _, c in walls[name])
        got = inside[name]
        print(f"{name:<62} {wall:6.2f} {cpu:6.2f} {got['median']:9.2f} {got['cpu']:6.2f}  "
              f"{'yes' if wall < TARGET_HISTORY_S else 'NO'}")
    print()
    for name in asked:
        got = inside[name]
        print(f"# {name}: exit {got['code']}: " + " | ".join(got["said"][:3 if a.verbose else 1])[:300])
    for name in asked:
        got = inside[name]
        for q in got.get("sql", []):
            print(f"\n# {name}: {q['rows']} rows in {q['seconds']:.3f} s: {q['sql'][:400]}\n#   params {q['params']}")
            for step in q["plan"]:
                print(f"#   plan: {step}")
        if "profile" in got:
            print(f"\n# {name}: cProfile, by own time\n{got['profile']}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2:])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10_000, help="runs in the history store (default 10000)")
    p.add_argument("--nodes", type=int, default=100, help="nodes of each run (default 100)")
    p.add_argument("--reps", type=int, default=5, help="repetitions of each recording measurement (default 5)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of each history question (default 3)")
    p.add_argument("--rebuild", action="store_true", help="build the history store again even if cached")
    p.add_argument("--skip-recording", action="store_true", help="only the history questions")
    p.add_argument("--skip-history", action="store_true", help="only the recording measurements")
    p.add_argument("--skip-runs", action="store_true", help="recording: leave out the real runs' wall times (1a)")
    p.add_argument("--explain", action="store_true", help="each question's SQL: its time alone and SQLite's plan")
    p.add_argument("--profile", action="store_true", help="each question's cProfile top functions")
    p.add_argument("--verbose", action="store_true", help="each question's first three lines of output, not one")
    a = p.parse_args()
    big, built = cached_history(a.runs, a.nodes, a.rebuild)
    size = big.stat().st_size / 2**20
    with sqlite3.connect(big) as conn:
        counts = [conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("runs", "nodes", "figures")]
    how = f"built in {built:.1f} s" if built is not None else "cached, built earlier"
    print(f"# history store {big}: {counts[0]} runs, {counts[1]} node rows, {counts[2]} figures, {size:.0f} MiB "
          f"({how})")
    print(f"# {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        if not a.skip_recording:
            recording(a, big, Path(tmp))
        if not a.skip_history:
            history_questions(a, big, Path(tmp))


if __name__ == "__main__":
    main()
