"""Test beds that stand real clusters up on one machine: a private Slurm, and network-namespace "nodes".

Each bed skips the test, with the reason, where this machine cannot host it, and removes all it made on exit.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# Daemons and `ip` live in sbin, which a plain user's PATH (and so a test runner's) may leave out.
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])


def free_port() -> int:
    """A TCP port free on loopback now; another process may still take it before the caller binds it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def which_or_skip(*binaries: str) -> list[str]:
    """Full paths of `binaries`, in order; skips the test naming every one that is missing."""
    found = [shutil.which(name, path=SEARCH_PATH) for name in binaries]
    missing = [name for name, path in zip(binaries, found) if path is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")
    return [path for path in found if path is not None]


def _require_root(what: str) -> None:
    if os.geteuid() != 0:
        pytest.skip(f"{what} needs root")


def _tail(*files: Path, lines: int = 15) -> str:
    return "\n".join(f"--- {file.name}\n" + "\n".join(file.read_text(errors="replace").splitlines()[-lines:])
                     for file in files if file.exists())


def _host_env(extra: dict[str, str] | None) -> dict[str, str]:
    # A runner that is itself inside a Slurm job would otherwise make srun join that job, not the bed's.
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    return {**env, **(extra or {})}


JOB_ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "DEADLINE"}


@dataclass
class SlurmJob:
    id: int
    state: str
    returncode: int  # -N when a signal N ended it, as in subprocess
    output: str  # the job's stdout and stderr


@dataclass
class SlurmBed:
    folder: Path
    conf: Path
    cluster: str
    env: dict[str, str]  # SLURM_CONF and PATH: merge into os.environ for srun/sbatch calls of one's own

    def srun(self, args: Sequence[str], env: dict[str, str] | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`srun ARGS` on the bed, output captured; tasks see the caller's environment plus `env`."""
        return subprocess.run(["srun", *args], env=_host_env({**self.env, **(env or {})}), capture_output=True,
                              text=True, timeout=timeout, check=False)

    def sbatch(self, script: Path, *options: str, env: dict[str, str] | None = None,
               timeout: float = 120) -> SlurmJob:
        """Submits `script` with `options` (not --output: the bed collects it), waits for the job to end."""
        full_env = _host_env({**self.env, **(env or {})})
        proc = subprocess.run(["sbatch", "--parsable", f"--output={self.folder}/job-%j.out", *options, str(script)],
                              env=full_env, capture_output=True, text=True, timeout=timeout, check=False)
        job_id = proc.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise RuntimeError(f"sbatch did not submit (exit {proc.returncode}): {proc.stderr.strip()}")
        # Polling beats `sbatch --wait`, which sleeps 2 s, then 8 s, between its own looks.
        deadline = time.monotonic() + timeout
        while True:
            show = subprocess.run(["scontrol", "show", "job", "-o", job_id], env=full_env, capture_output=True,
                                  text=True, check=True).stdout
            fields = dict(word.split("=", 1) for word in show.split() if "=" in word)
            if fields["JobState"] in JOB_ENDED:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"Slurm job {job_id} still {fields['JobState']} after {timeout:.0f} s")
            time.sleep(0.1)
        code, sig = (int(part) for part in fields["ExitCode"].split(":"))
        output = (self.folder / f"job-{job_id}.out").read_text()
        return SlurmJob(int(job_id), fields["JobState"], -sig if sig else code, output)


def _slurm_conf(folder: Path, cluster: str) -> str:
    settings = {
        # Lower case, as Slurm wants; unique, so that a job's SLURM_CLUSTER_NAME tells which bed ran it.
        "ClusterName": cluster, "SlurmctldHost": "localhost",
        "SlurmctldPort": free_port(), "SlurmdPort": free_port(),
        # No munge: the bed trusts everyone on this machine, as a test should.
        "AuthType": "auth/none", "CredType": "cred/none", "SlurmUser": "root", "SlurmdUser": "root",
        # No cgroups: containers and small VMs rarely give them to nested daemons.
        "ProctrackType": "proctrack/linuxproc", "TaskPlugin": "task/none", "MpiDefault": "none",
        "SelectType": "select/cons_tres", "SelectTypeParameters": "CR_Core",
        # Start batch jobs within a second of submission, not after the default 3 s batching delay.
        "SchedulerParameters": "batch_sched_delay=0",
        "StateSaveLocation": folder / "state", "SlurmdSpoolDir": folder / "spool",
        "SlurmctldPidFile": folder / "slurmctld.pid", "SlurmdPidFile": folder / "slurmd.pid",
        "SlurmctldLogFile": folder / "slurmctld.log", "SlurmdLogFile": folder / "slurmd.log",
    }
    lines = [f"{key}={value}" for key, value in settings.items()]
    lines += [f"NodeName=localhost CPUs={os.cpu_count() or 1} State=UNKNOWN",
              "PartitionName=bed Nodes=localhost Default=YES MaxTime=INFINITE State=UP"]
    return "\n".join(lines) + "\n"


def _kill(pids: Sequence[int]) -> None:
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _marked(marker: bytes) -> list[int]:
    """Processes whose environment holds `marker`: what one bed's daemons started, and nothing else."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:  # gone meanwhile
                continue
    return found


@contextmanager
def slurm_cluster(folder: Path, ready_timeout: float = 30) -> Iterator[SlurmBed]:
    """A one-node Slurm (controller and node daemon) kept in `folder`; srun/sbatch reach it through `.env`.

    The node has os.cpu_count() CPUs: ask srun for more tasks than that with --overcommit.
    """
    _require_root("a private Slurm")
    folder = folder.absolute()
    slurmctld, slurmd, srun = which_or_skip("slurmctld", "slurmd", "srun", "sbatch", "sinfo", "scontrol")[:3]
    # Steps talk over unix sockets named <spool>/localhost_<job>.<step>, which must fit in 107 bytes, or every
    # srun fails with "Unspecified error".
    if len(str(folder / "spool")) > 76:
        raise ValueError(f"{folder} is too long a path for Slurm's sockets: use tmp_path_factory.mktemp('slurm')")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "state").mkdir(exist_ok=True)
    (folder / "spool").mkdir(exist_ok=True)
    cluster = f"cb{secrets.token_hex(4)}"
    conf = folder / "slurm.conf"
    conf.write_text(_slurm_conf(folder, cluster))
    path = os.pathsep.join([os.path.dirname(sys.executable), os.path.dirname(srun), os.environ.get("PATH", "")])
    bed = SlurmBed(folder, conf, cluster, {"SLURM_CONF": str(conf), "PATH": path})
    # In the foreground (-D) the daemons stay our children, so a crash shows at once, and they also log to stderr,
    # which catches what they say before their log files open.
    logs = [folder / "slurmctld.out", folder / "slurmd.out"]
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        for argv, out in zip(([slurmctld, "-D", "-c"], [slurmd, "-D", "-N", "localhost"]), logs):
            with out.open("wb") as sink:
                daemons.append(subprocess.Popen(argv, env=_host_env(bed.env), stdout=sink, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, start_new_session=True))
        deadline = time.monotonic() + ready_timeout
        while True:
            if any(daemon.poll() is not None for daemon in daemons):
                pytest.skip(f"a Slurm daemon exited at start:\n{_tail(*logs)}")
            state = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=_host_env(bed.env),
                                   capture_output=True, text=True, check=False).stdout.strip()
            if state == "idle":
                break
            if time.monotonic() > deadline:
                pytest.skip(f"Slurm node not idle after {ready_timeout:.0f} s (state {state!r}):\n{_tail(*logs)}")
            time.sleep(0.2)
        yield bed
    finally:
        for daemon in daemons:
            daemon.terminate()
        for daemon in daemons:
            with suppress(subprocess.TimeoutExpired):
                daemon.wait(timeout=10)
        # Step daemons and job tasks outlive slurmd. They, and a daemon deaf to SIGTERM, all inherited SLURM_CONF
        # naming this bed's file.
        for _ in range(50):
            if not (leftovers := _marked(f"SLURM_CONF={conf}".encode())):
                break
            _kill(leftovers)
            time.sleep(0.1)
        for daemon in daemons:
            daemon.wait()


@dataclass
class NetnsBed:
    names: list[str]
    subnet: str
    ip: str

    def addr(self, node: int) -> str:
        """Node `node`'s address on eth0, the only link between nodes."""
        return f"{self.subnet}.{node + 1}"

    def argv(self, node: int, argv: Sequence[str], hostname: str | None = None) -> list[str]:
        """`argv` run in node `node`'s namespace, under its own host name: node<i>, which all nodes resolve."""
        name = hostname or f"node{node}"
        return [self.ip, "netns", "exec", self.names[node], "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', name, *argv]

    def popen(self, node: int, argv: Sequence[str], env: dict[str, str] | None = None, hostname: str | None = None,
              **kwargs: Any) -> subprocess.Popen:
        """Starts `argv` on node `node`, with the caller's environment plus `env`; the bed kills it at exit."""
        return subprocess.Popen(self.argv(node, argv, hostname), env={**os.environ, **(env or {})}, **kwargs)

    def run(self, node: int, argv: Sequence[str], env: dict[str, str] | None = None, hostname: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Runs `argv` on node `node` to the end, output captured."""
        return subprocess.run(self.argv(node, argv, hostname), env={**os.environ, **(env or {})},
                              capture_output=True, text=True, timeout=timeout, check=False)


def _ip(ip: str, *args: str) -> None:
    proc = subprocess.run([ip, *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"cannot build the namespace bed: `ip {' '.join(args)}`: {proc.stderr.strip()}")


@contextmanager
def netns_cluster(n_nodes: int, slow: dict[int, str] | None = None) -> Iterator[NetnsBed]:
    """`n_nodes` network namespaces joined by a bridge; nodes in `slow` send at most at their rate ("200mbit").

    Each node has lo and eth0 up, and resolves every node<i> to its address (from /etc/netns/<ns>/hosts).
    The bridge is in a namespace of its own, so nothing touches the host's network.
    """
    _require_root("network namespaces")
    ip, _, *tc = which_or_skip("ip", "unshare", *(["tc"] if slow else []))
    token = secrets.token_hex(3)
    # Beds never see each other (each has its own bridge), so the subnet only needs to differ for readable logs.
    subnet = f"10.{200 + secrets.randbelow(55)}.{secrets.randbelow(256)}"
    bed = NetnsBed([f"cb{token}-n{i}" for i in range(n_nodes)], subnet, ip)
    bridge = f"cb{token}-br"
    made: list[str] = []
    try:
        for ns in (bridge, *bed.names):
            _ip(ip, "netns", "add", ns)
            made.append(ns)
        _ip(ip, "-n", bridge, "link", "add", "br0", "type", "bridge")
        _ip(ip, "-n", bridge, "link", "set", "br0", "up")
        hosts = "127.0.0.1 localhost\n" + "".join(f"{bed.addr(i)} node{i}\n" for i in range(n_nodes))
        for i, ns in enumerate(bed.names):
            _ip(ip, "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}", "netns", bridge)
            _ip(ip, "-n", bridge, "link", "set", f"p{i}", "master", "br0", "up")
            _ip(ip, "-n", ns, "addr", "add", f"{bed.addr(i)}/24", "dev", "eth0")
            _ip(ip, "-n", ns, "link", "set", "eth0", "up")
            _ip(ip, "-n", ns, "link", "set", "lo", "up")
            # `ip netns exec` binds this over /etc/hosts, so host names resolve inside the node as on a cluster.
            etc = Path("/etc/netns") / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts)
        for i, rate in (slow or {}).items():
            _ip(ip, "netns", "exec", bed.names[i], tc[0], "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", rate,
                "burst", "64kb", "latency", "400ms")
        yield bed
    finally:
        for ns in reversed(made):
            # A process still inside would keep the namespace alive after `ip netns del`.
            pids = subprocess.run([ip, "netns", "pids", ns], capture_output=True, text=True, check=False).stdout
            _kill([int(pid) for pid in pids.split()])
            subprocess.run([ip, "netns", "del", ns], capture_output=True, check=False)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
