"""Where the results store lives, from --store or CLUSTERBENCH_STORE: a file path (SQLite), an sqlite://
URL in SQLAlchemy's form, a postgresql:// URL (a team's shared store), `off`, or by default an SQLite file
in the user's data directory. Checked before a run starts, without loading any database library, so that a
store that can never be opened (a port that is no number, a name too long for the file system) is refused
before anything is measured."""

from __future__ import annotations

import errno
import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from clusterbench.argtypes import clipped
from clusterbench.errors import UsageError
from clusterbench.inputs.printable import printable
from clusterbench.secrets import masked

ENV = "CLUSTERBENCH_STORE"
OFF = ("off", "none")
_POSTGRES = ("postgresql", "postgres", "postgresql+psycopg")
_SQLITE = ("sqlite", "sqlite+pysqlite")
# USER:PASSWORD@ at the start of what would be a file path (a password may hold a /): a URL whose scheme was left out.
_CREDENTIALS = re.compile(r"[^/:@\s]*:[^@]*@")
_FORMS = "a file path, sqlite:///RELATIVE/PATH, sqlite:////ABSOLUTE/PATH, a postgresql:// URL, or off"


@dataclass(frozen=True)
class Where:
    url: str  # for SQLAlchemy: postgresql+psycopg://...; sqlite:///PATH, for the record (the file is opened by name)
    shown: str  # for messages: the path, or the URL with its credentials masked
    path: Path | None = None  # the SQLite file

    @property
    def postgres(self) -> bool:
        return self.path is None


def default_path() -> Path:
    from platformdirs import user_data_path  # only where the default is asked for

    return user_data_path("clusterbench", appauthor=False) / "results.db"


def resolve(text: str | None, label: str = "--store") -> Where | None:
    """The store named by `text` (None: the environment's, else the default); None when it is off."""
    if text is None:
        text, label = os.environ.get(ENV) or None, ENV
    if text is None:
        return sqlite(default_path())
    text = text.strip()
    if text.lower() in OFF:
        return None
    if not text:
        raise UsageError(f"{label}: empty; give {_FORMS}")
    scheme, sep, rest = text.partition("://")
    if not sep and _CREDENTIALS.match(text):  # USER:PASSWORD@HOST/DB: a URL without its scheme, not a file name
        raise UsageError(f"{label} {clipped(masked(text))}: a URL needs its scheme (postgresql://USER@HOST/"
                         "DATABASE); a file of such a name is written ./NAME")
    if not sep:
        return sqlite(_expanded(text, label))
    scheme = scheme.lower()
    if scheme in _POSTGRES:
        return _postgres(rest, label)
    if scheme in _SQLITE:
        return sqlite(_sqlite_path(text, rest, label))
    # Masked before clipped: a clipped URL may have lost the @ that marks its password.
    raise UsageError(f"{label} {clipped(masked(text))}: unknown kind of store {clipped(scheme)!r}; give {_FORMS}")


def _expanded(text: str, label: str) -> Path:
    try:
        return Path(text).expanduser()
    except RuntimeError:  # ~user for a user this system does not know
        user = text[1:].split("/", 1)[0]
        raise UsageError(f"{label} {clipped(text)}: there is no user {clipped(user)!r} whose home ~{clipped(user)} "
                         "would be; give the path in full") from None


def _sqlite_path(text: str, rest: str, label: str) -> Path:
    """The file of an SQLAlchemy SQLite URL: sqlite:///RELATIVE or sqlite:////ABSOLUTE (after the third
    slash, as SQLAlchemy reads it). A URL of a database in memory keeps nothing, and one with a host or
    options is no form SQLAlchemy gives a file in: each refused with the form to write."""
    shown = clipped(masked(text))
    if rest in ("", "/", "/:memory:"):
        raise UsageError(f"{label} {shown}: a database in memory keeps nothing once the command ends; name a "
                         "file: sqlite:///RELATIVE/PATH, sqlite:////ABSOLUTE/PATH, or the path alone")
    if not rest.startswith("/") and "@" in rest:  # not echoed: what stands before the @ may be a password
        raise UsageError(f"{label} sqlite://...: an SQLite URL names no user and no host; write "
                         "sqlite:///RELATIVE/PATH, sqlite:////ABSOLUTE/PATH, or the path alone")
    if not rest.startswith("/"):
        raise UsageError(f"{label} {shown}: an SQLite URL names no host; for the file {clipped(rest)} write "
                         f"sqlite:///{clipped(rest)} (or the path alone)")
    path = rest[1:]
    if "?" in path:
        raise UsageError(f"{label} {shown}: options in an SQLite URL are not taken; write "
                         f"sqlite:///{clipped(path.split('?', 1)[0])}")
    return Path(path)


def sqlite(path: Path) -> Where:
    path = path.absolute()
    shown = printable(masked(str(path)))  # printed in lines of its own: a newline in a name stays in its line
    try:
        path.stat()
    except FileNotFoundError:
        pass
    except OSError as e:  # a name too long for the file system, a file where a folder should be, ...
        why = {errno.ENAMETOOLONG: "a name too long for the file system",
               errno.ENOTDIR: "a part of its path is a file, not a folder"}.get(e.errno, e.strerror or str(e))
        raise UsageError(f"store {clipped(shown)}: {why}") from None
    if path.is_dir():
        raise UsageError(f"store {shown}: is a folder; name the database file in it, e.g. {path / 'results.db'}")
    return Where(f"sqlite:///{path}", shown, path)


def _postgres(rest: str, label: str) -> Where:
    authority = rest.split("/", 1)[0]
    if "@" not in authority and "@" in rest.split("?", 1)[0]:  # USER:PASS/WORD@HOST: not echoed, nor masked whole
        raise UsageError(f"{label} postgresql://...: a / before the @ (in the user or the password) must be "
                         "written %2F; the host is what follows the @")
    shown = printable(masked(f"postgresql://{rest}"))
    # After the credentials (whose password may hold a ?): HOST:PORT, then /DATABASE, then ?QUERY.
    place, _, query = rest[authority.rfind("@") + 1:].partition("?")
    hosts = place.split("/", 1)[0].split("#", 1)[0]
    params = _query(query.partition("#")[0], f"{label} {shown}")
    if not hosts and "host" not in params and "hostaddr" not in params:
        raise UsageError(f"{label} {shown}: postgresql:// needs a host (postgresql://USER@HOST:PORT/DATABASE, or "
                         "a local server's socket folder: postgresql://USER@/DATABASE?host=/var/run/postgresql)")
    if "," in hosts or "," in params.get("host", ""):
        raise UsageError(f"{label} {shown}: one host per URL (postgresql://USER@HOST:PORT/DATABASE)")
    if hosts:
        _host_and_port(hosts, f"{label} {shown}")
    return Where(f"postgresql+psycopg://{rest}", shown)


# The parameters libpq takes in a URL's query (it refuses any other), and the values of those that have a set.
_CHOICES = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "gssencmode": ("disable", "prefer", "require"), "channel_binding": ("disable", "prefer", "require"),
    "sslnegotiation": ("postgres", "direct"), "sslcertmode": ("disable", "allow", "require"),
    "target_session_attrs": ("any", "read-write", "read-only", "primary", "standby", "prefer-standby"),
    "load_balance_hosts": ("disable", "random"), "ssl": ("true",),
}
_COUNTS = ("connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
           "tcp_user_timeout", "sslcompression", "sslsni", "gssdelegation")
_TAKEN = (*_CHOICES, *_COUNTS, "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "require_auth",
          "client_encoding", "options", "application_name", "fallback_application_name", "replication", "sslcert",
          "sslkey", "sslpassword", "sslrootcert", "sslcrl", "sslcrldir", "requirepeer", "ssl_min_protocol_version",
          "ssl_max_protocol_version", "krbsrvname", "gsslib", "service")


def _query(query: str, label: str) -> dict[str, str]:
    """A postgresql:// URL's ?KEY=VALUE&... as libpq would take it, refused in one line where libpq would
    refuse it only once a run has measured: an unknown key, a port that is no number, a mode of no such name."""
    params: dict[str, str] = {}
    for item in query.split("&") if query else []:
        key, eq, value = item.partition("=")
        key, value = unquote(key), unquote(value)
        if not eq or not key:
            raise UsageError(f"{label}: {clipped(item)!r} in its ?query is no KEY=VALUE")
        if key not in _TAKEN:
            raise UsageError(f"{label}: ?{clipped(key)}= is no parameter of a PostgreSQL connection")
        if key in params:
            raise UsageError(f"{label}: ?{clipped(key)}= is given twice")
        if key in _CHOICES and value not in _CHOICES[key]:
            raise UsageError(f"{label}: ?{key}={clipped(value)!r} is none of {', '.join(_CHOICES[key])}")
        if key in _COUNTS and not (value.isascii() and value.isdigit() and len(value) <= 9):
            raise UsageError(f"{label}: ?{key}={clipped(value)!r} is not a whole number")
        if key == "port":
            _port(value, label)
        params[key] = value
    return params


def _host_and_port(text: str, label: str) -> None:
    """HOST[:PORT] or [IPV6][:PORT], checked as the driver would only once it tried to connect."""
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise UsageError(f"{label}: the host opens an IPv6 address with [ and never closes it; write "
                             "[ADDRESS]:PORT, like [::1]:5432")
        inner, after = text[1:close], text[close + 1:]
        try:
            ipaddress.IPv6Address(inner)
        except ValueError:
            raise UsageError(f"{label}: [{clipped(inner)}] is not an IPv6 address") from None
        if after and not after.startswith(":"):
            raise UsageError(f"{label}: {clipped(after)!r} after the IPv6 address; write [ADDRESS]:PORT")
        port = after[1:] if after else None
    elif text.count(":") > 1:
        raise UsageError(f"{label}: an IPv6 address goes in brackets, like postgresql://USER@[::1]:5432/DATABASE")
    else:
        host, colon, port = text.partition(":")
        port = port if colon else None
        if not host:
            raise UsageError(f"{label}: postgresql:// needs a host before the port")
    if port is not None:
        _port(port, label)


def _port(port: str, label: str) -> None:
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535):
        raise UsageError(f"{label}: port {clipped(port)!r} is not a port number (1 to 65535)")
