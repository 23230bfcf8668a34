"""Where the results store lives, from --store or CLUSTERBENCH_STORE: a file path (SQLite), a
postgresql:// URL (a team's shared store), `off`, or by default an SQLite file in the user's data
directory. Checked before a run starts, without loading any database library."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from clusterbench.errors import UsageError

ENV = "CLUSTERBENCH_STORE"
OFF = ("off", "none")
_POSTGRES = ("postgresql", "postgres", "postgresql+psycopg")


@dataclass(frozen=True)
class Where:
    url: str  # for SQLAlchemy: sqlite:///PATH or postgresql+psycopg://...
    shown: str  # for messages: the path, or the URL without its password
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
        raise UsageError(f"{label}: empty; give a file path, a postgresql:// URL, or off")
    scheme, sep, rest = text.partition("://")
    if not sep:
        return sqlite(Path(text).expanduser())
    scheme = scheme.lower()
    if scheme in _POSTGRES:
        return _postgres(rest, label)
    if scheme == "sqlite" and rest.startswith("/"):
        return sqlite(Path(rest[1:] or "."))
    raise UsageError(f"{label} {scheme}://...: unknown kind of store {scheme!r}; give a file path (SQLite), "
                     "a postgresql:// URL, or off")


def sqlite(path: Path) -> Where:
    path = path.absolute()
    if path.is_dir():
        raise UsageError(f"store {path}: is a folder; name the database file in it, e.g. {path / 'results.db'}")
    return Where(f"sqlite:///{path}", str(path), path)


def _postgres(rest: str, label: str) -> Where:
    if not rest or rest.startswith("/"):
        raise UsageError(f"{label}: postgresql:// needs a host (postgresql://USER:PASSWORD@HOST:PORT/DATABASE)")
    credentials, at, place = rest.rpartition("@")
    user = credentials.partition(":")[0]
    shown = f"postgresql://{user + '@' if at else ''}{place}"  # never print a password
    return Where(f"postgresql+psycopg://{rest}", shown)
