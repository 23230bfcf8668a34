"""Start the ranks: spawn N local workers, or be one rank of a job a launcher started.

Every rank, however started, meets the others at one rendezvous store (rendezvous.py) before
the process group forms. Local runs host that store in the parent on 127.0.0.1 port 0, so the
port is free by construction and parallel runs never collide; the parent watches its workers
and, when one dies or stops answering, ends the rest and names the rank. Under an external
launcher nobody watches: each rank says how it ended, naming the ranks that went silent.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
import os
import re
import signal
import socket
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from clusterbench import flight
from clusterbench.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, RunFailed, UsageError, one_line
from clusterbench.flight import record
from clusterbench.hw.network import check_interface
from clusterbench.runtime import forking
from clusterbench.runtime.dist import DistConfig, Worker, init
from clusterbench.runtime.launchers import Joined
from clusterbench.runtime.rank import Progress
from clusterbench.runtime.rendezvous import Member, Rendezvous, waiting_text
from clusterbench.units import ranks_text

# After the first rank fails, the others get this long to notice and exit on their own.
GRACE_S = 3.0
# How often a rank's process says it lives; a survivor waits a few beats to tell the dead from the waiting.
BEAT_S = 0.5

JobFn = Callable[[Worker, Any, Progress], None]


@dataclass(frozen=True)
class Job:
    """A picklable description of what every rank runs: fn(worker, payload, progress)."""

    fn: JobFn
    payload: Any
    dist: DistConfig
    iface: str | None = None  # the network interface Gloo and NCCL use between hosts
    nccl_logs: Path | None = None  # where each rank's NCCL log goes (NCCL runs)
    flight_dumps: Path | None = None  # where the ranks' Flight Recorder dumps go when a collective fails
    imports: tuple[str, ...] = ()  # modules the ranks need, beyond fn's: imported once for all local ranks


@dataclass(frozen=True)
class Outcome:
    """How the whole job ended: one exit code and, unless it is 0, one line naming the root cause."""

    code: int
    message: str | None = None
    lost: tuple[tuple[int, str | None], ...] = ()  # the ranks that died, hung or went silent, and where they were


@dataclass(frozen=True)
class Seat:
    """One rank's place, as its launcher assigned it."""

    rank: int
    world_size: int
    local_rank: int
    node_index: str | None = None


def run_rank(job: Job, rdzv: Rendezvous, seat: Seat, planned: Callable[[int], str | None] = lambda rank: None
             ) -> Outcome:
    """Join (within the rendezvous timeout; `planned` names the node a rank that never comes was meant for),
    run the job on this rank, and turn every ending into an exit code and one line."""
    warnings.filterwarnings("ignore")
    if job.nccl_logs is not None:
        capture_nccl_log(job.nccl_logs)
    progress = Progress(seat.rank, rdzv)
    try:
        if job.iface:
            check_interface(job.iface)  # on this rank's host: where Ray put it, not where the driver runs
            os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = job.iface
        me = Member(seat.rank, socket.gethostname(), seat.local_rank, seat.node_index)
        members = rdzv.join(me, job.dist.rendezvous_s, planned)
        os.environ.update(record.environment())  # torch sizes its Flight Recorder when the group forms
        alive = _heartbeat(rdzv, seat.rank)
        try:
            worker = init(job.dist, seat.rank, seat.world_size, seat.local_rank, rdzv.group_store(), members,
                          rdzv.host)
            rdzv.settle(job.dist.timeout_s)
            job.fn(worker, job.payload, progress)
        finally:
            alive.set()
        return Outcome(EXIT_OK)
    except UsageError as e:
        code, kind, message = EXIT_USAGE, "usage", one_line(e)
    except KeyboardInterrupt:
        code, kind, message = EXIT_INTERRUPTED, "failed", "interrupted"
    except RunFailed as e:
        code, kind, message = EXIT_FAILED, "result", one_line(e)
    except Exception as e:  # noqa: BLE001 - any failure of a rank becomes one line, not a traceback
        code, kind, message = EXIT_FAILED, "failed", one_line(e)
        if os.environ.get("CLUSTERBENCH_DEBUG"):
            traceback.print_exc()
        if dist.is_initialized():  # a collective may have failed or timed out: every rank's record says which
            _leave_record(rdzv, seat.rank, ask=True)
    progress.error(kind, message)
    return Outcome(code, message)


def _leave_record(rdzv: Rendezvous, rank: int, ask: bool = False) -> None:
    """Leave this rank's Flight Recorder on the board (and with `ask`, ask every live rank for theirs);
    a store that is gone, or a torch that cannot dump, leaves the run's line as it was."""
    with contextlib.suppress(Exception):  # a record is a bonus: the heartbeat and the rank's own line come first
        if ask:
            rdzv.ask_records()
        rdzv.leave_record(rank, record.trace(rank))


def _heartbeat(rdzv: Rendezvous, rank: int) -> threading.Event:
    """Count this rank's signs of life on the board every BEAT_S until the returned event is set: a
    rank blocked in a collective (waiting on a dead peer) still counts, a dead or stopped one does not."""
    stop = threading.Event()

    def beat() -> None:
        left = False
        while not stop.wait(BEAT_S):
            try:
                rdzv.beat(rank)
                # A rank stuck outside any collective never fails one: it leaves its record when asked.
                if not left and rdzv.records_asked():
                    left = True
                    _leave_record(rdzv, rank)
            except (RuntimeError, OSError):  # the store's host is gone: nobody is left to tell
                return

    threading.Thread(target=beat, name="clusterbench-heartbeat", daemon=True).start()
    return stop


# NCCL's own account of a run: what it found and chose at start-up, and its network. TUNING (a
# line per call, the algorithm and protocol chosen) is left to the user: logging every call would
# slow what the sweep measures.
NCCL_SUBSYSTEMS = "INIT,ENV,GRAPH,NET"


def capture_nccl_log(folder: Path) -> None:
    """Have NCCL write this rank's log into `folder`, unless the user set NCCL_DEBUG (then their
    level, subsystems and destination all stand). A host that cannot make the folder writes none."""
    if "NCCL_DEBUG" in os.environ:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS=NCCL_SUBSYSTEMS,
                      NCCL_DEBUG_FILE=str(folder / "nccl.%h.%p.log"))


def _spawned(job: Job, seat: Seat, port_from: Connection) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", _loopback_name())
    try:
        if not port_from.poll(job.dist.rendezvous_s):  # the parent never opened its store
            raise RunFailed("the rendezvous store never opened")
        port = port_from.recv()
        rdzv = Rendezvous.open("127.0.0.1", port, seat.world_size, job.dist.rendezvous_s, server=False)
        code = run_rank(job, rdzv, seat).code
    except RunFailed:
        code = EXIT_FAILED
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: a broken process group can block in its destructor.
    os._exit(code)


def _loopback_name() -> str:
    for name in os.listdir("/sys/class/net") if os.path.isdir("/sys/class/net") else []:
        if name.startswith("lo"):
            return name
    return "lo"


def run(job: Job, nproc: int, joined: Joined | None = None) -> Outcome:
    """Run the job on every rank: spawned here, or this process's rank of a launcher's job."""
    if joined is not None:
        return _run_joined(job, joined)
    return _run_local(job, nproc)


def _run_joined(job: Job, me: Joined) -> Outcome:
    assert me.master_addr is not None and me.master_port is not None  # the harness checked
    rdzv = Rendezvous.open(me.master_addr, me.master_port, me.world_size, job.dist.rendezvous_s, me.hosts_store,
                           prefix=f"clusterbench/{me.attempt}")
    outcome = run_rank(job, rdzv, Seat(me.rank, me.world_size, me.local_rank, me.node), me.planned_node)
    if outcome.code == EXIT_OK:
        dist.destroy_process_group()
        _leave(rdzv, me, me.world_size)
        return outcome
    # Before the group formed, each rank's own line is the whole story (the rendezvous names the absent).
    if outcome.code == EXIT_USAGE or me.world_size == 1 or not dist.is_initialized():
        return outcome
    line, silent = _survivor_report(rdzv, me.rank, outcome.message or "")
    # Every survivor reads every rank's record: the line on each node names who held the job up. Rank 0 keeps the dumps.
    said = flight_said(Outcome(outcome.code, line, silent), rdzv, job.flight_dumps if me.rank == 0 else None)
    _leave(rdzv, me, me.world_size - len(silent))
    return said


def _leave(rdzv: Rendezvous, me: Joined, expected: int) -> None:
    """The rank hosting the store stays until the `expected` ranks have left (or GRACE_S), so that
    none loses the store while it reports or says goodbye; one that finds it gone has nothing left to do."""
    try:
        rdzv.store.add("left", 1)
        deadline = time.monotonic() + GRACE_S
        while me.hosts_store and rdzv.store.add("left", 0) < expected and time.monotonic() < deadline:
            time.sleep(0.05)
    except (RuntimeError, OSError):
        pass


def _survivor_report(rdzv: Rendezvous, rank: int, own: str) -> tuple[str, tuple[tuple[int, str | None], ...]]:
    """Under an external launcher: wait for the others to report, then name the silent ranks.
    Returns the line and the silent ranks, each with where it was."""
    endings: dict[int, tuple[str, str]] = {}
    where: dict[int, str] = {}
    deadline = time.monotonic() + GRACE_S
    try:
        while rdzv.ended() < rdzv.world_size and time.monotonic() < deadline:
            time.sleep(0.1)
        endings, where = rdzv.endings(), rdzv.whereabouts()
    except (RuntimeError, OSError):
        pass  # the store's host is gone too: say what was seen before it went
    silent = _stopped(rdzv, [r for r in range(rdzv.world_size) if r not in endings and r != rank])
    lost = tuple((r, where.get(r)) for r in silent)
    if not endings:
        return f"rank {rank}: {own}", lost
    if not silent:
        first = min(endings, key=lambda r: (endings[r][0] != "result", r))
        return f"rank {first}: {endings[first][1]}", ()
    return f"{waiting_text(silent, where, rdzv.members)} (rank {rank} saw: {_gist(own)})", lost


def _stopped(rdzv: Rendezvous, quiet: list[int]) -> list[int]:
    """Of the ranks that have not said how they ended, those whose process stopped beating: they died
    or were stopped, and the others are alive, blocked on them until their own timeout. Where every
    quiet rank still beats, none can be told from the others (a hang looks like a wait): all stay quiet."""
    if not quiet:
        return quiet
    try:
        before = rdzv.beats()
        time.sleep(3 * BEAT_S)
        after = rdzv.beats()
    except (RuntimeError, OSError):
        return quiet  # the store's host is gone: nobody can tell
    stopped = [r for r in quiet if after.get(r, 0) <= before.get(r, 0)]
    return stopped or quiet


def _gist(message: str) -> str:
    """A backend's error without its source path and its boilerplate advice."""
    return re.sub(r"\[[^\]]*\.(cc|cpp|hpp|h):\d+\] ", "", message).split(". This is typically")[0]


def _context(job: Job) -> Any:
    """How local ranks start: forked from a process that imported torch and the job's modules once, so
    N ranks do not each pay the seconds of those imports. From this process itself where a fork of it
    starts as clean as a new one: a CPU job, a torch built without CUDA (a parent that has asked CUDA
    anything leaves its forks unable to use it), and no thread started since torch was imported
    (forking.py; the store's threads start after the fork). Otherwise from a forkserver that imports
    them, or, where there is none, spawned."""
    methods = mp.get_all_start_methods()
    if "fork" in methods and job.dist.device_type == "cpu" and not torch.backends.cuda.is_built():
        for name in (job.fn.__module__, *job.imports):
            importlib.import_module(name)
        if forking.pools_unstarted():  # the imports included
            return mp.get_context("fork")
    if "forkserver" not in methods:
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch.distributed", __name__, job.fn.__module__, *job.imports])
    return ctx


def _run_local(job: Job, nproc: int) -> Outcome:
    ctx = _context(job)
    pipes = [ctx.Pipe(duplex=False) for _ in range(nproc)]
    procs = [ctx.Process(target=_spawned, args=(job, Seat(r, nproc, r), reader), daemon=True)
             for r, (reader, _) in enumerate(pipes)]
    for p in procs:
        p.start()
    try:
        # The store after the ranks: its threads are never forked. Each rank learns its port by its own pipe.
        rdzv = Rendezvous.open("127.0.0.1", 0, nproc, job.dist.rendezvous_s, server=True)
        rdzv.settle(job.dist.timeout_s)  # the parent only reads the board, after the ranks
        for _, writer in pipes:
            writer.send(rdzv.port)
        hung = _supervise(procs)
    except KeyboardInterrupt:
        _stop(procs)
        return Outcome(EXIT_INTERRUPTED, "interrupted by the user")
    except BaseException:
        _stop(procs)
        raise
    codes = {r: p.exitcode for r, p in enumerate(procs)}
    return outcome_of(codes, hung, rdzv, job.dist.timeout_s, job.flight_dumps)


def _supervise(procs: list) -> list[int]:
    """Wait for all ranks; after the first failure, give the rest GRACE_S, then end them."""
    deadline = None
    while True:
        time.sleep(0.05)
        codes = [p.exitcode for p in procs]
        if all(c is not None for c in codes):
            return []
        if deadline is None and any(c not in (None, 0) for c in codes):
            deadline = time.monotonic() + GRACE_S
        if deadline is not None and time.monotonic() > deadline:
            hung = [r for r, p in enumerate(procs) if p.exitcode is None]
            _stop(procs)
            return hung


def _stop(procs: list) -> None:
    for p in procs:
        if p.exitcode is None:
            p.terminate()
    for p in procs:
        p.join(timeout=5)
        if p.exitcode is None:
            p.kill()
            p.join(timeout=5)


def outcome_of(codes: dict[int, int | None], hung: list[int], rdzv: Rendezvous, timeout_s: float,
               dumps_to: Path | None = None) -> Outcome:
    """One exit code and one line for the whole run, the root cause first (for a supervisor that
    knows each rank's exit code: the local parent, the Ray driver), with what the ranks' Flight
    Recorders say, their dumps kept in `dumps_to`."""
    ending = _ending(codes, hung, rdzv, timeout_s)
    return flight_said(ending, rdzv, dumps_to) if ending.code == EXIT_FAILED else ending


def flight_said(outcome: Outcome, rdzv: Rendezvous, dumps_to: Path | None) -> Outcome:
    """The run's line with the rank the Flight Recorders name as holding the others up (which
    collective, which sequence number, which sizes), and the dumps the ranks left written to `dumps_to`
    for `clusterbench diagnose`. A store that is gone or a dump that cannot be read changes nothing."""
    try:
        left = rdzv.records()
        if dumps_to is not None:
            for rank, data in left.items():
                record.write(rank, data, dumps_to)
        said = flight.culprit(left) if left else None
    except (RuntimeError, OSError, UsageError):
        return outcome
    return replace(outcome, message=f"{outcome.message}; Flight Recorder: {said}") if said else outcome


def _ending(codes: dict[int, int | None], hung: list[int], rdzv: Rendezvous, timeout_s: float) -> Outcome:
    errors, where = rdzv.endings(), rdzv.whereabouts()

    def during(r: int) -> str:
        return f" during {where[r]}" if r in where else ""

    usage = [r for r, (kind, _) in sorted(errors.items()) if kind == "usage"]
    if usage:
        return Outcome(EXIT_USAGE, errors[usage[0]][1])
    died = [r for r, c in codes.items() if c not in (0, None) and r not in errors and r not in hung]
    if died:
        r = died[0]
        how = f"killed by {signal.Signals(-codes[r]).name}" if codes[r] < 0 else f"exit code {codes[r]}"
        return Outcome(EXIT_FAILED, f"rank {r} died ({how}){during(r)}; the other ranks were stopped",
                       tuple((d, where.get(d)) for d in died))
    if hung:
        waiting = [r for r in where if r not in hung]
        others = f"; {ranks_text(waiting)} gave up" if waiting else "; the other ranks gave up"
        return Outcome(EXIT_FAILED, f"{ranks_text(hung)} stopped responding{during(hung[0])}{others} "
                                    f"after the {timeout_s:g} s timeout", tuple((h, where.get(h)) for h in hung))
    results = [r for r, (kind, _) in sorted(errors.items()) if kind == "result"]
    if results:
        return Outcome(EXIT_FAILED, errors[results[0]][1])
    if errors:
        r = min(errors)
        return Outcome(EXIT_FAILED, f"rank {r}: {errors[r][1]}")
    return Outcome(EXIT_OK)
