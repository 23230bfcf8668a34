"""Start the ranks as Ray actors, one per placement-group bundle, and supervise them from here.

Ray only places and ends the workers. The ranks meet as under every other launcher: this
driver hosts the rendezvous store on its own node, as the local launcher does on 127.0.0.1,
so the board still says which rank stopped where and outcome_of words the ending the same way.
"""

from __future__ import annotations

import io
import logging
import os
import re
import signal
import socket
import sys
import time
from typing import Any

from clusterbench.argtypes import clipped
from clusterbench.errors import EXIT_FAILED, EXIT_INTERRUPTED, RunFailed, UsageError, one_line
from clusterbench.runtime import launch
from clusterbench.runtime.rendezvous import Rendezvous

# What a rank reads from its environment; ranks on a joined cluster inherit the node's, not ours.
FORWARDED = ("CLUSTERBENCH_", "NCCL_", "GLOO_", "TORCH_", "TRANSFORMERS_")


def default_world_size(address: str | None, device_type: str) -> int:
    """Ranks without --nproc: the cluster's GPUs on cuda, else 2 as locally. The connection stays
    open for `run`, so a local Ray starts once."""
    if device_type != "cuda":
        return 2
    return max(1, int(_connect(address).cluster_resources().get("GPU", 0)))


def run(job: launch.Job, nproc: int, address: str | None) -> launch.Outcome:
    """Run the job on nproc Ray actors; one exit code and one line, as launch.run gives."""
    ray = _connect(address)
    from ray.util import get_node_ip_address
    from ray.util.placement_group import remove_placement_group

    pg, actors = None, []
    try:
        pg = _place(ray, job.dist.device_type, nproc, job.dist.timeout_s, _address(address) == "local")
        actors, seats, visible = _seat(ray, pg, job, nproc)
        addr = get_node_ip_address()
        rdzv = Rendezvous.open(addr, 0, nproc, job.dist.timeout_s, server=True)
        codes, hung = _supervise(ray, [a.run.remote(job, addr, rdzv.port, s, v)
                                       for a, s, v in zip(actors, seats, visible)], rdzv)
        return launch.outcome_of(codes, hung, rdzv, job.dist.timeout_s, job.flight_dumps)
    except KeyboardInterrupt:
        return launch.Outcome(EXIT_INTERRUPTED, "interrupted by the user")
    finally:
        for a in actors:
            ray.kill(a)
        if pg is not None:
            remove_placement_group(pg)
        ray.shutdown()


def _address(address: str | None) -> str:
    # "local" rather than None: None would quietly join whatever cluster `ray start` last left here.
    return address or os.environ.get("RAY_ADDRESS") or "local"


def _connect(address: str | None) -> Any:
    # Read when ray is imported. Ray's own notes would break the one-line error: the scheduler's about
    # demand it cannot meet yet (a cluster too small for the job), and the raylet's paragraph on stdout
    # about a worker that died (the outcome names the rank and what it was doing).
    os.environ.setdefault("RAY_SCHEDULER_EVENTS", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS_SKIP_REGEX", "A worker died or was killed while executing")
    try:
        import ray
    except ImportError:
        raise UsageError("--launcher ray needs the ray package: pip install ray") from None
    if ray.is_initialized():
        return ray
    address = _address(address)
    if address == "local":
        options: dict[str, Any] = {"include_dashboard": False, "object_store_memory": 128 * 1024**2}
    else:
        _check_reachable(address)
        env = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED)}
        options = {"runtime_env": {"env_vars": env}}
    try:
        ray.init(address=address, log_to_driver=True, logging_level=logging.ERROR, **options)
    except (ConnectionError, ValueError, RuntimeError, ray.exceptions.RayError) as e:
        raise UsageError(f"cannot start or join Ray at {address}: {one_line(e)} (a cluster with token "
                         "authentication also needs RAY_AUTH_MODE=token and its token here)") from None
    return ray


def _check_reachable(address: str) -> None:
    """Ray retries an address that does not answer for many minutes: ask once, briefly."""
    host, _, port = address.rpartition(":")
    if "://" in address or not re.fullmatch(r"[0-9]+", port):
        return  # a Ray Client address or "auto": Ray resolves those
    if len(port) > 5 or not 1 <= int(port) <= 65535:
        raise UsageError(f"the Ray address {clipped(address)!r}: a port is 1 to 65535")
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as e:
        raise UsageError(f"nothing answers at the Ray address {address}: {e.strerror or e}") from None


def _place(ray: Any, device_type: str, nproc: int, timeout_s: float, fixed: bool) -> Any:
    """One bundle per rank, packed on as few nodes as hold them. A Ray started here (fixed) is this
    machine and never grows, so waiting for what it lacks is pointless."""
    from ray.util.placement_group import placement_group, remove_placement_group

    kind = "GPU" if device_type == "cuda" else "CPU"
    pg = placement_group([{kind: 1}] * nproc, strategy="PACK")
    total = ray.cluster_resources().get(kind, 0)
    wait_s = 0 if fixed and total < nproc else timeout_s
    if not ray.wait([pg.ready()], timeout=wait_s)[0]:
        remove_placement_group(pg)
        free, nodes = ray.available_resources().get(kind, 0), sum(n["Alive"] for n in ray.nodes())
        within = f" within {timeout_s:g} s" if wait_s else ""
        raise UsageError(f"Ray cannot place {nproc} ranks ({nproc} bundles of 1 {kind}){within}: "
                         f"the cluster has {total:g} {kind} ({free:g} free) on {nodes} node(s)")
    return pg


class _Rank:
    """One rank's Ray worker: says where Ray put it, then runs the rank as a spawned one would."""

    def where(self) -> tuple[str, str, list[str]]:
        import ray

        return ray.get_runtime_context().get_node_id(), socket.gethostname(), [str(g) for g in ray.get_gpu_ids()]

    def run(self, job: launch.Job, addr: str, port: int, seat: launch.Seat, visible: str | None) -> int:
        if visible is not None:
            # NCCL takes NVLink or P2P to a peer GPU only if it can see it: every rank on a node sees the
            # job's GPUs there (as Ray Train arranges) and picks its own by local rank.
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
        try:
            rdzv = Rendezvous.open(addr, port, seat.world_size, job.dist.timeout_s, server=False)
            if seat.rank == 0:
                sys.stdout = _Echo(rdzv)
            return launch.run_rank(job, rdzv, seat).code
        except RunFailed as e:  # the driver's store out of reach: nobody else can say why
            print(f"clusterbench: rank {seat.rank}: {e}", file=sys.stderr, flush=True)
            return EXIT_FAILED


class _Echo(io.TextIOBase):
    """Rank 0's stdout, line by line on the board for the driver to print: Ray forwards workers' output
    too, but drops what is still on its way when the driver disconnects, often the table's last lines."""

    def __init__(self, board: Rendezvous) -> None:
        self.board, self.shown, self.part = board, 0, ""

    def write(self, text: str) -> int:
        *lines, self.part = (self.part + text).split("\n")
        for line in lines:
            self.board.store.set(f"out/{self.shown}", line)
            self.shown += 1
        return len(text)


def _echo(board: Rendezvous, shown: int) -> int:
    while board.store.check([f"out/{shown}"]):
        print(board.store.get(f"out/{shown}").decode(), flush=True)
        shown += 1
    return shown


def _seat(ray: Any, pg: Any, job: launch.Job, nproc: int) -> tuple[list[Any], list[launch.Seat], list[str | None]]:
    """An actor per bundle, in rank order: node by node, this driver's node first, so that rank 0,
    which writes the run folder, is here whenever Ray put any rank here."""
    from ray.exceptions import GetTimeoutError, RayActorError
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    gpu = job.dist.device_type == "cuda"
    actors = [ray.remote(_Rank).options(num_cpus=0 if gpu else 1, num_gpus=1 if gpu else 0, scheduling_strategy=
                                        PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)).remote()
              for i in range(nproc)]
    try:
        places = ray.get([a.where.remote() for a in actors], timeout=job.dist.timeout_s)
    except (GetTimeoutError, RayActorError) as e:
        raise RunFailed(f"Ray's workers did not start within {job.dist.timeout_s:g} s: {one_line(e)}") from None
    here = ray.get_runtime_context().get_node_id()
    nodes = sorted(dict.fromkeys(node for node, _, _ in places), key=lambda node: node != here)
    order = sorted(range(nproc), key=lambda i: nodes.index(places[i][0]))
    actors, places = [actors[i] for i in order], [places[i] for i in order]
    seats, visible = [], []
    for rank, (node, _, _) in enumerate(places):
        peers = [r for r, p in enumerate(places) if p[0] == node]
        seats.append(launch.Seat(rank, nproc, peers.index(rank), str(nodes.index(node))))
        visible.append(",".join(places[r][2][0] for r in peers) if gpu else None)
    if places[0][0] != here:
        print(f"clusterbench: rank 0 runs on {places[0][1]}, not on this machine: the run folder is written there",
              file=sys.stderr)
    return actors, seats, visible


def _supervise(ray: Any, refs: list[Any], board: Rendezvous) -> tuple[dict[int, int | None], list[int]]:
    """Wait for all ranks, echoing rank 0's lines; after the first failure, give the rest GRACE_S.
    Returns the exit codes and the ranks that were still running."""
    from ray.exceptions import RayActorError

    rank_of = {ref: r for r, ref in enumerate(refs)}
    codes: dict[int, int | None] = dict.fromkeys(rank_of.values())
    pending, deadline, shown = list(refs), None, 0
    while pending and (deadline is None or time.monotonic() < deadline):
        done, pending = ray.wait(pending, num_returns=1, timeout=0.5)  # short, so Ctrl-C is seen
        shown = _echo(board, shown)
        for ref in done:
            try:
                codes[rank_of[ref]] = ray.get(ref)
            except RayActorError:
                # Ray does not say what ended it; what ends a process unasked (the OOM killer, ray.kill) is SIGKILL.
                codes[rank_of[ref]] = -signal.SIGKILL
            if codes[rank_of[ref]] != 0 and deadline is None:
                deadline = time.monotonic() + launch.GRACE_S
    _echo(board, shown)
    return codes, sorted(rank_of[ref] for ref in pending)
