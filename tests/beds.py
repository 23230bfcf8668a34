"""Test beds that stand real clusters up on one machine: a private Slurm, network-namespace "nodes", a Slurm
across those nodes, and a CPU quota that makes a node slow.

Each bed skips the test, with the reason, where this machine cannot host it, and removes all it made on exit.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
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

    @property
    def host_env(self) -> dict[str, str]:
        """The caller's environment without SLURM_*: with `env` over it, what the bed's own clients run with."""
        return _host_env(None)

    def _where(self, argv: Sequence[str]) -> list[str]:
        """`argv` as run where the controller can be reached: on this machine."""
        return list(argv)

    def _client(self, argv: Sequence[str], env: dict[str, str] | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self._where(argv), env=_host_env({**self.env, **(env or {})}), capture_output=True,
                              text=True, timeout=timeout, check=False)

    def srun(self, args: Sequence[str], env: dict[str, str] | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`srun ARGS` on the bed, output captured; tasks see the caller's environment plus `env`."""
        return self._client(["srun", *args], env, timeout)

    def scontrol(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`scontrol ARGS` on the bed, output captured."""
        return self._client(["scontrol", *args])

    def node_states(self) -> dict[str, str]:
        """Each node's state as `sinfo -N` prints it ("idle", "drained", "down*"); empty until the controller is up."""
        out = self._client(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=30).stdout
        return {name: state for name, state in (line.split() for line in out.splitlines() if line.strip())}

    def node_state(self, name: str) -> str:
        """Node `name`'s state, as in node_states()."""
        return self.node_states()[name]

    def wait_node_state(self, name: str, state: str, timeout: float = 10) -> str:
        """Node `name`'s state once it is `state`, or the last one seen after `timeout` seconds.

        A node leaves a job moments after srun returns: drained at once, it reads "draining" until then.
        """
        deadline = time.monotonic() + timeout
        while (seen := self.node_state(name)) != state and time.monotonic() < deadline:
            time.sleep(0.1)
        return seen

    def sbatch(self, script: Path, *options: str, env: dict[str, str] | None = None,
               timeout: float = 120) -> SlurmJob:
        """Submits `script` with `options` (not --output: the bed collects it), waits for the job to end."""
        proc = self._client(["sbatch", "--parsable", f"--output={self.folder}/job-%j.out", *options, str(script)],
                            env, timeout)
        job_id = proc.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise RuntimeError(f"sbatch did not submit (exit {proc.returncode}): {proc.stderr.strip()}")
        # Polling beats `sbatch --wait`, which sleeps 2 s, then 8 s, between its own looks.
        deadline = time.monotonic() + timeout
        while True:
            show = self._client(["scontrol", "show", "job", "-o", job_id], env)
            show.check_returncode()
            fields = dict(word.split("=", 1) for word in show.stdout.split() if "=" in word)
            if fields["JobState"] in JOB_ENDED:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"Slurm job {job_id} still {fields['JobState']} after {timeout:.0f} s")
            time.sleep(0.1)
        code, sig = (int(part) for part in fields["ExitCode"].split(":"))
        output = (self.folder / f"job-{job_id}.out").read_text()
        return SlurmJob(int(job_id), fields["JobState"], -sig if sig else code, output)


def _slurm_conf(folder: Path, cluster: str, controller: str, nodes: dict[str, str], per_node: str = "") -> str:
    """slurm.conf for `nodes` (name: the rest of its NodeName line); `per_node` ("-%n") tells apart the files of
    several slurmd sharing the folder."""
    settings = {
        # Lower case, as Slurm wants; unique, so that a job's SLURM_CLUSTER_NAME tells which bed ran it.
        "ClusterName": cluster, "SlurmctldHost": controller,
        "SlurmctldPort": free_port(), "SlurmdPort": free_port(),
        # No munge: the bed trusts everyone on this machine, as a test should.
        "AuthType": "auth/none", "CredType": "cred/none", "SlurmUser": "root", "SlurmdUser": "root",
        # No cgroups: containers and small VMs rarely give them to nested daemons.
        "ProctrackType": "proctrack/linuxproc", "TaskPlugin": "task/none", "MpiDefault": "none",
        "SelectType": "select/cons_tres", "SelectTypeParameters": "CR_Core",
        # Start batch jobs within a second of submission, not after the default 3 s batching delay.
        "SchedulerParameters": "batch_sched_delay=0",
        "StateSaveLocation": folder / "state", "SlurmdSpoolDir": folder / f"spool{per_node}",
        "SlurmctldPidFile": folder / "slurmctld.pid", "SlurmdPidFile": folder / f"slurmd{per_node}.pid",
        "SlurmctldLogFile": folder / "slurmctld.log", "SlurmdLogFile": folder / f"slurmd{per_node}.log",
    }
    lines = [f"{key}={value}" for key, value in settings.items()]
    lines += [f"NodeName={name} {attributes} State=UNKNOWN" for name, attributes in nodes.items()]
    lines.append(f"PartitionName=bed Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def _check_socket_room(spool: Path, node: str) -> None:
    # Steps talk over unix sockets named <spool>/<node>_<job>.<step>, which must fit in 107 bytes, or every srun
    # fails with "Unspecified error". 20 characters hold any job and step number.
    if len(f"{spool}/{node}_") + 20 > 107:
        raise ValueError(f"{spool.parent} is too long a path for Slurm's sockets: use tmp_path_factory.mktemp('slurm')")


def _slurm_env(conf: Path, srun: str) -> dict[str, str]:
    path = os.pathsep.join([os.path.dirname(sys.executable), os.path.dirname(srun), os.environ.get("PATH", "")])
    return {"SLURM_CONF": str(conf), "PATH": path}


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
def _serving(bed: SlurmBed, daemons: dict[Path, list[str]], ready_timeout: float) -> Iterator[None]:
    """Runs the bed's `daemons` (their output file: argv) until every node is idle; at exit stops them, and all
    they started."""
    # In the foreground (-D) the daemons stay our children, so a crash shows at once, and they also log to stderr,
    # which catches what they say before their log files open.
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for out, argv in daemons.items():
            with out.open("wb") as sink:
                procs.append(subprocess.Popen(argv, env=_host_env(bed.env), stdout=sink, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True))
        deadline = time.monotonic() + ready_timeout
        while True:
            if any(proc.poll() is not None for proc in procs):
                pytest.skip(f"a Slurm daemon exited at start:\n{_tail(*daemons)}")
            states = bed.node_states()
            if states and set(states.values()) == {"idle"}:
                break
            if time.monotonic() > deadline:
                pytest.skip(f"Slurm nodes not idle after {ready_timeout:.0f} s ({states}):\n{_tail(*daemons)}")
            time.sleep(0.2)
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            with suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        # Step daemons and job tasks outlive slurmd. They, and a daemon deaf to SIGTERM, all inherited SLURM_CONF
        # naming this bed's file.
        for _ in range(50):
            if not (leftovers := _marked(f"SLURM_CONF={bed.conf}".encode())):
                break
            _kill(leftovers)
            time.sleep(0.1)
        for proc in procs:
            proc.wait()


@contextmanager
def slurm_cluster(folder: Path, ready_timeout: float = 30) -> Iterator[SlurmBed]:
    """A one-node Slurm (controller and node daemon) kept in `folder`; srun/sbatch reach it through `.env`.

    The node has os.cpu_count() CPUs: ask srun for more tasks than that with --overcommit.
    """
    _require_root("a private Slurm")
    folder = folder.absolute()
    slurmctld, slurmd, srun = which_or_skip("slurmctld", "slurmd", "srun", "sbatch", "sinfo", "scontrol")[:3]
    _check_socket_room(folder / "spool", "localhost")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "state").mkdir(exist_ok=True)
    (folder / "spool").mkdir(exist_ok=True)
    cluster = f"cb{secrets.token_hex(4)}"
    conf = folder / "slurm.conf"
    conf.write_text(_slurm_conf(folder, cluster, "localhost", {"localhost": f"CPUs={os.cpu_count() or 1}"}))
    bed = SlurmBed(folder, conf, cluster, _slurm_env(conf, srun))
    with _serving(bed, {folder / "slurmctld.out": [slurmctld, "-D", "-c"],
                        folder / "slurmd.out": [slurmd, "-D", "-N", "localhost"]}, ready_timeout):
        yield bed


def _named(hostname: str, argv: Sequence[str]) -> list[str]:
    """`argv` under host name `hostname`, in a UTS namespace of its own: the machine's name stays as it is."""
    return ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', hostname, *argv]


@dataclass
class NetnsBed:
    names: list[str]
    subnet: str
    ip: str
    nsenter: str

    def addr(self, node: int) -> str:
        """Node `node`'s address on eth0, the only link between nodes."""
        return f"{self.subnet}.{node + 1}"

    def argv(self, node: int, argv: Sequence[str], hostname: str | None = None) -> list[str]:
        """`argv` run in node `node`'s namespace, under its own host name: node<i>, which all nodes resolve."""
        return [self.ip, "netns", "exec", self.names[node], *_named(hostname or f"node{node}", argv)]

    def enter(self, node: int, argv: Sequence[str], hostname: str | None = None) -> list[str]:
        """`argv` run in node `node`'s network, under `hostname` if given, but otherwise as on the host.

        Unlike argv(), it keeps the host's mounts: /sys/fs/cgroup, which slurmd needs (`ip netns exec` mounts a
        fresh /sys), and the host's /etc/hosts, not the node's.
        """
        return [self.nsenter, f"--net=/run/netns/{self.names[node]}", *(_named(hostname, argv) if hostname else argv)]

    def popen(self, node: int, argv: Sequence[str], env: dict[str, str] | None = None, hostname: str | None = None,
              **kwargs: Any) -> subprocess.Popen:
        """Starts `argv` on node `node`, with the caller's environment plus `env`; the bed kills it at exit."""
        return subprocess.Popen(self.argv(node, argv, hostname), env={**os.environ, **(env or {})}, **kwargs)

    def run(self, node: int, argv: Sequence[str], env: dict[str, str] | None = None, hostname: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Runs `argv` on node `node` to the end, output captured."""
        return subprocess.run(self.argv(node, argv, hostname), env={**os.environ, **(env or {})},
                              capture_output=True, text=True, timeout=timeout, check=False)

    def set_rate(self, node: int, rate: str | None, to: int | None = None) -> None:
        """Caps what node `node` sends at `rate` ("200mbit"), to node `to` alone if given, or lifts the cap
        (None); traffic under way feels it."""
        (tc,) = which_or_skip("tc")
        at_eth0 = [tc, "-n", self.names[node], "qdisc"]
        shown = subprocess.run([*at_eth0, "show", "dev", "eth0", "root"], capture_output=True, text=True,
                               check=False).stdout
        if rate is not None and to is None:
            # This kernel has no netem: a token bucket is the one way to slow a link.
            _must(*at_eth0, "replace", "dev", "eth0", "root", "tbf", "rate", rate, "burst", "64kb", "latency", "400ms")
            return
        if "tbf" in shown or "htb" in shown:
            # `tc qdisc del` fails where there is nothing to delete; lifting no cap is no error.
            _must(*at_eth0, "del", "dev", "eth0", "root")
        if rate is not None:
            # One link: htb sends what no filter picks straight out, so only packets to `to` meet the cap
            # (this kernel has neither prio nor netem).
            _must(*at_eth0, "add", "dev", "eth0", "root", "handle", "1:", "htb")
            _must(tc, "-n", self.names[node], "class", "add", "dev", "eth0", *_link_class(rate))
            _must(tc, "-n", self.names[node], "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip",
                  "prio", "1", "u32", "match", "ip", "dst", f"{self.addr(to)}/32", "flowid", "1:1")

    def cap_across(self, node: int, rate: str, inside: Sequence[int]) -> None:
        """Caps what node `node` sends to every node but those `inside` its rack at `rate`: a leaf switch whose
        uplink is slow. htb's default class holds the cap; a filter sends the rack's own traffic around it."""
        (tc,) = which_or_skip("tc")
        at = [tc, "-n", self.names[node]]
        self.set_rate(node, None)
        _must(*at, "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1")
        _must(*at, "class", "add", "dev", "eth0", *_link_class(rate))
        _must(*at, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:2", "htb", "rate", "10gbit",
              "quantum", "60000")
        for mate in inside:
            _must(*at, "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match",
                  "ip", "dst", f"{self.addr(mate)}/32", "flowid", "1:2")

    @contextmanager
    def link_lifter(self, node: int) -> Iterator[Callable[[], None]]:
        """A call that lifts node `node`'s one-link cap (set_rate(..., to=)) at once: a `tc` started beforehand
        waits on its stdin, where one started on demand waits its turn for the CPU with the ranks. The cap is
        opened to 100 Gbit/s, not deleted, so no packet queued behind it is dropped for TCP to resend."""
        (tc,) = which_or_skip("tc")
        batch = subprocess.Popen([tc, "-n", self.names[node], "-batch", "-"], stdin=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
        assert batch.stdin is not None

        def lift() -> None:
            batch.stdin.write(" ".join(["class", "change", "dev", "eth0", *_link_class("100gbit")]) + "\n")
            batch.stdin.flush()

        try:
            yield lift
        finally:
            batch.stdin.close()
            batch.wait(timeout=30)


def _link_class(rate: str) -> list[str]:
    """The htb class set_rate(..., to=) caps one link with; quantum set, as htb's own would be huge at 100 Gbit/s."""
    return ["parent", "1:", "classid", "1:1", "htb", "rate", rate, "ceil", rate, "burst", "64kb", "quantum", "60000"]


def _must(*argv: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        command = " ".join([Path(argv[0]).name, *argv[1:]])
        pytest.skip(f"cannot build the namespace bed: `{command}`: {proc.stderr.strip()}")


@contextmanager
def netns_cluster(n_nodes: int, slow: dict[int, str] | None = None) -> Iterator[NetnsBed]:
    """`n_nodes` network namespaces joined by a bridge; nodes in `slow` send at most at their rate ("200mbit").

    Each node has lo and eth0 up, and resolves every node<i> to its address (from /etc/netns/<ns>/hosts).
    The bridge is in a namespace of its own, so nothing touches the host's network.
    """
    _require_root("network namespaces")
    ip, _, nsenter = which_or_skip("ip", "unshare", "nsenter")
    token = secrets.token_hex(3)
    # Beds never see each other (each has its own bridge), so the subnet only needs to differ for readable logs.
    subnet = f"10.{200 + secrets.randbelow(55)}.{secrets.randbelow(256)}"
    bed = NetnsBed([f"cb{token}-n{i}" for i in range(n_nodes)], subnet, ip, nsenter)
    bridge = f"cb{token}-br"
    made: list[str] = []
    try:
        for ns in (bridge, *bed.names):
            _must(ip, "netns", "add", ns)
            made.append(ns)
        _must(ip, "-n", bridge, "link", "add", "br0", "type", "bridge")
        _must(ip, "-n", bridge, "link", "set", "br0", "up")
        hosts = "127.0.0.1 localhost\n" + "".join(f"{bed.addr(i)} node{i}\n" for i in range(n_nodes))
        for i, ns in enumerate(bed.names):
            _must(ip, "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}", "netns", bridge)
            _must(ip, "-n", bridge, "link", "set", f"p{i}", "master", "br0", "up")
            _must(ip, "-n", ns, "addr", "add", f"{bed.addr(i)}/24", "dev", "eth0")
            _must(ip, "-n", ns, "link", "set", "eth0", "up")
            _must(ip, "-n", ns, "link", "set", "lo", "up")
            # `ip netns exec` binds this over /etc/hosts, so host names resolve inside the node as on a cluster.
            etc = Path("/etc/netns") / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts)
        for i, rate in (slow or {}).items():
            bed.set_rate(i, rate)
        yield bed
    finally:
        for ns in reversed(made):
            # A process still inside would keep the namespace alive after `ip netns del`.
            pids = subprocess.run([ip, "netns", "pids", ns], capture_output=True, text=True, check=False).stdout
            _kill([int(pid) for pid in pids.split()])
            subprocess.run([ip, "netns", "del", ns], capture_output=True, check=False)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)


HOSTS = Path("/etc/hosts")
HOSTS_LOCK = Path("/run/clusterbench-etc-hosts.lock")


@contextmanager
def _hosts_lock() -> Iterator[None]:
    # Beds side by side (pytest-xdist) edit the one /etc/hosts: unserialised, one would drop another's lines.
    with HOSTS_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@contextmanager
def _host_names(addresses: dict[str, str]) -> Iterator[None]:
    """`name: address` entries in the host's /etc/hosts while the block runs; exactly those go again at exit."""
    ours = [f"{address} {name}" for name, address in addresses.items()]
    with _hosts_lock():
        text = HOSTS.read_text()
        with HOSTS.open("a") as hosts:
            hosts.write(("" if text.endswith("\n") or not text else "\n") + "".join(f"{line}\n" for line in ours))
    try:
        yield
    finally:
        with _hosts_lock(), HOSTS.open("r+") as hosts:
            kept = "".join(line for line in hosts.readlines() if line.rstrip("\n") not in ours)
            # Rewritten in place, not renamed over: /etc/hosts is often a bind mount. Our lines are usually last,
            # so the rewrite changes no byte before the truncation and no reader sees a half-written file.
            hosts.seek(0)
            hosts.write(kept)
            hosts.truncate()


@dataclass
class SlurmNodesBed(SlurmBed):
    names: list[str]  # Slurm's node names, each also its node's host name; names[i] is netns node i
    netns: NetnsBed

    def _where(self, argv: Sequence[str]) -> list[str]:
        # The controller listens on node 0's address, which only node 0's network reaches.
        return self.netns.enter(0, argv)


@contextmanager
def slurm_nodes(folder: Path, n_nodes: int, slow: dict[int, str] | None = None,
                ready_timeout: float = 60, resolvable: bool = True) -> Iterator[SlurmNodesBed]:
    """A Slurm of `n_nodes` one-CPU nodes, one slurmd in each node of a netns_cluster (`slow` as there), kept in
    `folder`; the controller runs on node 0.

    Clients must run in node 0's network: use the bed's methods, or `bed.netns.enter(0, argv)` with `bed.env`.
    Job tasks see the host's /etc/hosts, in which the bed names the nodes while it runs; with resolvable=False it
    does not, and the job's node names resolve nowhere (Slurm itself reaches the nodes by their NodeAddr).
    """
    _require_root("a multi-node Slurm")
    folder = folder.absolute()
    slurmctld, slurmd, srun = which_or_skip("slurmctld", "slurmd", "srun", "sbatch", "sinfo", "scontrol")[:3]
    # Unique names: beds running side by side share /etc/hosts.
    cluster = f"cb{secrets.token_hex(4)}"
    names = [f"{cluster}n{i}" for i in range(n_nodes)]
    _check_socket_room(folder / f"spool-{names[-1]}", names[-1])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "state").mkdir(exist_ok=True)
    for name in names:
        (folder / f"spool-{name}").mkdir(exist_ok=True)
    conf = folder / "slurm.conf"
    with netns_cluster(n_nodes, slow) as net, \
            _host_names({name: net.addr(i) for i, name in enumerate(names)} if resolvable else {}):
        conf.write_text(_slurm_conf(folder, cluster, f"{names[0]}({net.addr(0)})",
                                    {name: f"NodeAddr={net.addr(i)} CPUs=1" for i, name in enumerate(names)}, "-%n"))
        bed = SlurmNodesBed(folder, conf, cluster, _slurm_env(conf, srun), names, net)
        # slurmctld and each slurmd check that the host name is the one slurm.conf gives them.
        daemons = {folder / "slurmctld.out": net.enter(0, [slurmctld, "-D", "-c"], names[0])}
        daemons |= {folder / f"slurmd-{name}.out": net.enter(i, [slurmd, "-D", "-N", name], name)
                    for i, name in enumerate(names)}
        with _serving(bed, daemons, ready_timeout):
            yield bed


@contextmanager
def cpu_quota(fraction: float) -> Iterator[Callable[[int], None]]:
    """A cgroup whose processes together get at most `fraction` of one CPU; yields add(pid), which puts a process
    (all its threads) in it, and with it the children it starts afterwards. At exit its processes go back to the
    root cgroup."""
    _require_root("a CPU quota")
    period = 100_000
    quota = max(1000, round(fraction * period))  # the kernel's floor is 1 ms a period
    v1, v2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
    if (v1 / "cpu.cfs_quota_us").exists():
        root, limits = v1, {"cpu.cfs_period_us": str(period), "cpu.cfs_quota_us": str(quota)}
    elif (v2 / "cgroup.subtree_control").exists() and "cpu" in (v2 / "cgroup.subtree_control").read_text().split():
        root, limits = v2, {"cpu.max": f"{quota} {period}"}
    else:
        pytest.skip("no cgroup CPU controller: neither cgroup v1's /sys/fs/cgroup/cpu nor cgroup v2's with cpu enabled")
    group = root / f"clusterbench-{secrets.token_hex(4)}"
    group.mkdir()
    try:
        for name, value in limits.items():
            (group / name).write_text(value)

        def add(pid: int) -> None:
            # cgroup.procs, not v1's `tasks`: `tasks` takes one thread, and a torch process has many. A process
            # listed a moment ago may have ended since (a Slurm node's step daemons come and go): nothing to slow.
            with suppress(ProcessLookupError):
                (group / "cgroup.procs").write_text(str(pid))

        yield add
    finally:
        for _ in range(50):
            for pid in (group / "cgroup.procs").read_text().split():
                with suppress(ProcessLookupError):  # ended meanwhile
                    (root / "cgroup.procs").write_text(pid)
            try:
                group.rmdir()
                break
            except OSError:  # busy while an exiting process still counts as inside
                time.sleep(0.1)
        else:
            group.rmdir()  # says why it still cannot go
