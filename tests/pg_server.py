"""A real PostgreSQL server for the tests of the results store's PostgreSQL side: `initdb` into a temporary
folder, password (scram-sha-256) authentication for one superuser, a server on a free loopback port, and
`pg_ctl stop -m fast` at exit, whatever happened meanwhile.

Skips the test, with the reason, only where PostgreSQL's server programs are not installed (.ci/run installs
Debian's `postgresql`, whose programs live in /usr/lib/postgresql/VERSION/bin, off the PATH).
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from beds import free_port

USER = "clusterbench"
PASSWORD = "s3cret-" + secrets.token_hex(6)  # distinctive: a test can tell it never reaches any message
SERVER_USER = "postgres"  # who runs the server when the tests run as root: PostgreSQL refuses to run as root
START_TIMEOUT_S = 60


@dataclass
class PgServer:
    folder: Path  # the data folder, its socket and its log live under it
    port: int
    bindir: Path
    user: str = USER
    password: str = PASSWORD

    def url(self, database: str = "postgres", password: str | None = None, port: int | None = None) -> str:
        """What a user gives --store: postgresql://USER:PASSWORD@127.0.0.1:PORT/DATABASE."""
        return (f"postgresql://{self.user}:{self.password if password is None else password}"
                f"@127.0.0.1:{self.port if port is None else port}/{database}")

    def connect(self, database: str = "postgres"):  # -> psycopg.Connection, autocommit
        import psycopg  # the store's own driver

        return psycopg.connect(host="127.0.0.1", port=self.port, user=self.user, password=self.password,
                               dbname=database, autocommit=True, connect_timeout=10)

    def sql(self, statement: str, params: tuple = (), database: str = "postgres") -> list[tuple]:
        """Run one statement in its own connection; the rows it returns (none for a statement without)."""
        with self.connect(database) as conn:
            cur = conn.execute(statement, params or None)  # None: a % in the text is just a %
            return cur.fetchall() if cur.description else []

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; its --store URL."""
        name = name or f"cb_{secrets.token_hex(4)}"
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise ValueError(f"database name {name!r}: lower-case letters, digits and _ only")
        with self.connect() as conn:
            # FILE_COPY (PostgreSQL 15 on): a copy of the template's files, not all of it through the WAL; faster.
            strategy = " STRATEGY FILE_COPY" if conn.info.server_version >= 150000 else ""
            conn.execute(f"CREATE DATABASE {name}{strategy}")
        return self.url(name)


def server_bindir() -> Path | None:
    """The folder of initdb and pg_ctl: on the PATH, else Debian's /usr/lib/postgresql/*/bin (newest first)."""
    on_path = [shutil.which(name) for name in ("initdb", "pg_ctl")]
    if all(on_path):
        return Path(os.path.realpath(on_path[0])).parent  # /usr/local/bin/initdb may link into Debian's folder
    def major(folder: str) -> int:
        found = re.search(r"/postgresql/(\d+)/bin$", folder)
        return int(found.group(1)) if found else 0
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=major, reverse=True):
        if all((Path(folder) / name).is_file() for name in ("initdb", "pg_ctl", "postgres")):
            return Path(folder)
    return None


def _as_server_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv  # a plain user runs their own server
    runuser = shutil.which("runuser", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
    if runuser:
        return [runuser, "-u", SERVER_USER, "--", *argv]
    return ["su", SERVER_USER, "-s", "/bin/sh", "-c", " ".join(_quote(a) for a in argv)]


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def _run(argv: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    # LC_ALL=C: initdb takes its locale from the environment, which may name one this machine lacks.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {"LC_ALL": "C", "LANG": "C"}
    return subprocess.run(_as_server_user(argv), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _log_tail(log: Path, lines: int = 20) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else "(no log)"


def _in_memory(room: int = 1 << 30) -> str | None:
    """/dev/shm when it is a writable folder with `room` bytes free; None (the temporary folder) otherwise."""
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return None
    return "/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) and stat.f_bavail * stat.f_frsize >= room else None


@contextmanager
def postgres_server() -> Iterator[PgServer]:
    """A PostgreSQL server of its own, in a temporary folder, for as long as the block runs."""
    bindir = server_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed: no initdb/pg_ctl on the PATH nor in /usr/lib/postgresql/*/bin "
                    "(.ci/run installs Debian's postgresql)")
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam(SERVER_USER)
        except KeyError:
            raise RuntimeError(f"running as root, but there is no {SERVER_USER!r} user to run PostgreSQL as "
                               "(Debian's postgresql package creates it)") from None
    # Not under pytest's tmp_path: that lies in a folder only root may enter, and the server runs as postgres.
    # A short path, too: the Unix socket's path must fit in 107 bytes. In memory where there is room: a loaded
    # disk took seconds to delete the few thousand files of a data folder, and nothing here need outlive the tests.
    folder = Path(tempfile.mkdtemp(prefix="cb-pg-", dir=_in_memory()))
    data, log, pwfile = folder / "data", folder / "server.log", folder / "pwfile"
    pwfile.write_text(PASSWORD + "\n")
    pwfile.chmod(0o600)
    if os.geteuid() == 0:
        for path in (folder, pwfile):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    server = PgServer(folder, 0, bindir)
    started = False
    try:
        initdb = _run([str(bindir / "initdb"), "-D", str(data), "-U", USER, f"--pwfile={pwfile}",
                       "--auth=scram-sha-256", "--no-locale", "-E", "UTF8", "--no-sync"],
                      folder, timeout=120)
        if initdb.returncode != 0:
            raise RuntimeError(f"initdb failed ({initdb.returncode}): {initdb.stderr.strip() or initdb.stdout.strip()}")
        pwfile.unlink()
        for _attempt in range(3):  # a free port may be taken by another process before the server binds it
            server.port = free_port()
            # fsync off: a test server's data need not survive a crash of this machine, and commits are many.
            options = (f"-p {server.port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off "
                       "-c synchronous_commit=off -c full_page_writes=off")
            start = _run([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w",
                          "-t", str(START_TIMEOUT_S), "start"], folder, timeout=START_TIMEOUT_S + 30)
            started = start.returncode == 0
            if started or "could not bind" not in _log_tail(log).lower() + start.stderr.lower():
                break
        if not started:
            raise RuntimeError(f"pg_ctl start failed ({start.returncode}): {start.stderr.strip()}\n"
                               f"--- {log.name}\n{_log_tail(log)}")
        yield server
    finally:
        if data.exists():  # stop it even where the start said it failed: it may have come up all the same
            stop = _run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "-t", "30", "stop"], folder,
                        timeout=60)
            if stop.returncode != 0 and (data / "postmaster.pid").exists():
                _kill_postmaster(data / "postmaster.pid")
        shutil.rmtree(folder, ignore_errors=True)


def _kill_postmaster(pidfile: Path) -> None:
    """The server did not stop when asked: SIGQUIT (immediate shutdown), then SIGKILL."""
    try:
        pid = int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    for sig in (3, 9):  # SIGQUIT, SIGKILL
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        for _ in range(50):
            time.sleep(0.1)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
