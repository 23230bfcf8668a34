"""The test beds themselves: what other tests build on must do what it says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from beds import _marked, cpu_quota, netns_cluster, slurm_nodes

# Stops the clock at the receiver's answer, sent once all has arrived: delivery, not buffering, is timed.
SEND = """
import socket, sys, time
with socket.create_connection((sys.argv[1], int(sys.argv[2]))) as sock:
    start = time.monotonic()
    sock.sendall(bytes(int(sys.argv[3])))
    sock.shutdown(socket.SHUT_WR)
    sock.recv(1)
    print(time.monotonic() - start)
"""
RECEIVE = """
import socket, sys
with socket.create_server(("", int(sys.argv[1]))) as server:
    print("listening", flush=True)
    while True:
        conn, _ = server.accept()
        with conn:
            while conn.recv(1 << 16):
                pass
            conn.sendall(b"k")
"""
# CPU seconds this process gets in one second of wall time.
BUSY = """
import time
end = time.monotonic() + 1
while time.monotonic() < end:
    pass
print(time.process_time())
"""
# BUSY as a child, once told to go on stdin.
SPAWN_BUSY = f"import subprocess, sys; sys.stdin.readline(); subprocess.run([sys.executable, '-c', {BUSY!r}])"


def test_slurm_nodes_run_a_step_on_every_named_node_and_drain_one(tmp_path_factory: pytest.TempPathFactory) -> None:
    with slurm_nodes(tmp_path_factory.mktemp("slurm"), 3) as bed:
        hosts = Path("/etc/hosts").read_text().splitlines()
        assert all(f"{bed.netns.addr(i)} {name}" in hosts for i, name in enumerate(bed.names))
        proc = bed.srun(["-N", "3", "-n", "3", "hostname"], timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert sorted(proc.stdout.split()) == sorted(bed.names)
        drain = bed.scontrol("update", f"nodename={bed.names[2]}", "state=drain", 'reason="x"')
        assert drain.returncode == 0, drain.stderr
        assert bed.wait_node_state(bed.names[2], "drained") == "drained"
        assert bed.wait_node_state(bed.names[0], "idle") == "idle"
    assert not any(name in line for line in Path("/etc/hosts").read_text().splitlines() for name in bed.names)
    assert not _marked(f"SLURM_CONF={bed.conf}".encode())


def test_set_rate_slows_a_link_then_restores_it() -> None:
    with netns_cluster(2) as bed:
        receiver = bed.popen(0, [sys.executable, "-c", RECEIVE, "5000"], stdout=subprocess.PIPE, text=True)
        try:
            assert receiver.stdout is not None and receiver.stdout.readline() == "listening\n"

            def send_seconds() -> float:
                proc = bed.run(1, [sys.executable, "-c", SEND, bed.addr(0), "5000", str(256 << 10)], timeout=30)
                assert proc.returncode == 0, proc.stderr
                return float(proc.stdout)

            def qdisc() -> str:
                return subprocess.run(["tc", "-n", bed.names[1], "qdisc", "show", "dev", "eth0", "root"],
                                      capture_output=True, text=True, check=True).stdout

            bed.set_rate(1, "200mbit")
            bed.set_rate(1, "2mbit")  # a change, not a second qdisc
            assert "tbf" in qdisc() and "rate 2Mbit" in qdisc()
            # Past its 64 KiB burst, 192 KiB at 2 Mbit/s take 0.79 s: a floor no load can lower.
            assert send_seconds() > 0.6
            bed.set_rate(1, None)
            assert "tbf" not in qdisc()
            bed.set_rate(1, None)  # lifting no cap is no error
            assert send_seconds() < 0.6
        finally:
            receiver.kill()
            receiver.wait()


def test_set_rate_to_one_node_slows_that_link_alone() -> None:
    with netns_cluster(3) as bed:
        receivers = [bed.popen(i, [sys.executable, "-c", RECEIVE, "5000"], stdout=subprocess.PIPE, text=True)
                     for i in (0, 2)]
        try:
            assert all(r.stdout is not None and r.stdout.readline() == "listening\n" for r in receivers)

            def send_seconds(to: int) -> float:
                proc = bed.run(1, [sys.executable, "-c", SEND, bed.addr(to), "5000", str(256 << 10)], timeout=30)
                assert proc.returncode == 0, proc.stderr
                return float(proc.stdout)

            bed.set_rate(1, "2mbit", to=0)
            assert send_seconds(0) > 0.6  # past the burst, as above
            assert send_seconds(2) < 0.6  # node1's other link is untouched
            with bed.link_lifter(1) as lift:
                lift()
            assert send_seconds(0) < 0.6
            bed.set_rate(1, None)
            assert "htb" not in subprocess.run(["tc", "-n", bed.names[1], "qdisc", "show", "dev", "eth0", "root"],
                                               capture_output=True, text=True, check=True).stdout
        finally:
            for receiver in receivers:
                receiver.kill()
                receiver.wait()


def cpu_cgroup(pid: int) -> str:
    """The cgroup that counts `pid`'s CPU time: cgroup v1's cpu hierarchy, else the v2 one."""
    lines = (line.split(":", 2) for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines())
    paths = {controllers: path for _, controllers, path in lines}
    return next((path for controllers, path in paths.items() if "cpu" in controllers.split(",")), paths.get("", ""))


def test_cpu_quota_holds_a_process_and_its_children_to_their_share() -> None:
    outside = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True)
    holder = subprocess.Popen(["sleep", "30"])
    try:
        with cpu_quota(0.1) as add:
            # The busy loop is the child of the process put in the group: what it starts follows it in.
            parent = subprocess.Popen([sys.executable, "-c", SPAWN_BUSY], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
            add(parent.pid)
            inside, _ = parent.communicate("go\n", timeout=30)
            add(holder.pid)
            group = cpu_cgroup(holder.pid)
            assert group.startswith("/clusterbench-")
        # Still running at exit, it went back to the root group, and the group is gone.
        assert cpu_cgroup(holder.pid) == "/"
        assert not Path(f"/sys/fs/cgroup/cpu{group}").exists() and not Path(f"/sys/fs/cgroup{group}").exists()
    finally:
        holder.kill()
        holder.wait()
    held, free = float(inside), float(outside.communicate(timeout=30)[0])
    # A tenth of a core for one second is 0.1 s; the free loop has a core of its own unless the machine is busy.
    assert held < 0.4 and free > 2 * held, (held, free)
