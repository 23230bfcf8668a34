"""Passwords never printed: every URL password and password= value is masked, whatever characters users type
in them unescaped (@ : / ? # and spaces, a "://" of their own), with or without a scheme, one URL or several
in a line; user names, hosts and everything else stay as they were where no password could be among them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterbench.cli import shown
from clusterbench.secrets import masked, masked_argv


@pytest.mark.parametrize(("text", "shown_as"), [
    ("postgresql://bob:s3cret@db:5432/runs", "postgresql://bob:***@db:5432/runs"),
    ("--store postgresql://u:p#w@h:abc/db: port 'abc'", "--store postgresql://u:***@h:abc/db: port 'abc'"),
    ("postgresql://u:p?w@h/db", "postgresql://u:***@h/db"),
    ("https://u:p/w@gw:9091 refused", "https://u:***@gw:9091 refused"),
    ("postgresql://u:p@ss@db/x", "postgresql://u:***@db/x"),
    ("postgresql://u@db/x?sslmode=require&password=zz", "postgresql://u@db/x?sslmode=require&password=***"),
    ('host=db password="two words" user=u', "host=db password=*** user=u"),
    ("sslpassword='x y' PASSFILE=/root/.pgpass", "sslpassword=*** PASSFILE=***"),
    ("postgresql://bob@db/x", "postgresql://bob@db/x"),
    ("a plain line, 3 = 3", "a plain line, 3 = 3"),
    # A / in the user part, a space in the password, a password with a scheme of its own.
    ("--pushgateway https://u/x:S3cret@host:9091: refused", "--pushgateway https://u/x:***@host:9091: refused"),
    ("store postgresql://alice:pa ss@db.example/cb: failed", "store postgresql://alice:***@db.example/cb: failed"),
    ("postgresql://u:pa@ ss@db/cb", "postgresql://u:***@db/cb"),
    ("https://u:x://y@gw:9091", "https://u:***@gw:9091"),
    # argparse repeats a value as it was typed: without its scheme, quoted, or as a path made of it.
    ("unrecognized arguments: bob:S3cret@gw:9091", "unrecognized arguments: bob:***@gw:9091"),
    ("unrecognized arguments: --store 0:pa ss@db", "unrecognized arguments: --store 0:***@db"),
    ("invalid choice: 'bob:S3c@ret@gw'", "invalid choice: 'bob:***@gw'"),
    ("no run folder at postgresql:/alice:S3cret@db/cb: missing", "no run folder at postgresql:***@db/cb: missing"),
    ("a https://a:b@c and postgresql://d:e@f/g", "a https://a:***@c and postgresql://d:***@f/g"),
    # Where no password stands, nothing is masked.
    ("postgresql://host/db: failed for alice@x", "postgresql://host/db: failed for alice@x"),
    ("http://[::1]:9091 and u@[::1]:5432 at 10:30", "http://[::1]:9091 and u@[::1]:5432 at 10:30"),
])
def test_a_password_is_masked_and_nothing_else(text: str, shown_as: str) -> None:
    assert masked(text) == shown_as


def test_argv_keeps_its_shape() -> None:
    argv = ["clusterbench", "fleet", "--store=postgresql://u:hunter2@db/x", "--pushgateway", "https://a:b@gw"]
    assert masked_argv(argv) == ["clusterbench", "fleet", "--store=postgresql://u:***@db/x", "--pushgateway",
                                 "https://a:***@gw"]
    assert "hunter2" not in " ".join(masked_argv(argv))


def test_an_error_line_stays_one_line_and_says_only_what_it_says() -> None:
    said = shown("no run at runs/a\nCULPRIT rank 0\x1b[31m\t\udcff")
    assert said == "no run at runs/a\\nCULPRIT rank 0\\x1b[31m\\t\\udcff"
    assert shown("héllo, wörld") == "héllo, wörld"


MARK = "Zq9"  # begins every password drawn: what must never be seen again
PASSWORD = st.text(st.sampled_from("abcXYZ019 @:/?#%&=+'\"!$-_.~"), max_size=12).map(lambda s: MARK + s)
USER = st.text(st.sampled_from("abc019._-/%"), min_size=1, max_size=8).filter(lambda s: not s.startswith("/"))
HOST = st.sampled_from(["db", "db.example:5432", "[::1]:9091", "gw", "10.0.0.7:9091", ""])
AROUND = st.sampled_from(["", "--store ", "clusterbench: error: store ", "unrecognized arguments: x ", "'"])
AFTER = st.sampled_from(["", "/cb", "/cb?sslmode=require", ": connection refused", "/db: user a@b failed", "'"])


@settings(max_examples=300, deadline=None, derandomize=True)
@given(scheme=st.sampled_from(["postgresql://", "postgres://", "https://", "http://", "ray://"]), user=USER,
       password=PASSWORD, host=HOST, before=AROUND, after=AFTER)
def test_no_password_drawn_is_ever_shown(scheme: str, user: str, password: str, host: str, before: str,
                                         after: str) -> None:
    line = f"{before}{scheme}{user}:{password}@{host}{after}"
    assert MARK not in masked(line), (line, masked(line))
    assert MARK not in shown(line)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(user=USER.filter(lambda s: "/" not in s), password=PASSWORD, host=HOST, before=st.sampled_from(["", "unrecognized arguments: ", "invalid choice: '", "--x="]))
def test_no_password_without_a_scheme_is_ever_shown(user: str, password: str, host: str, before: str) -> None:
    line = f"{before}{user}:{password}@{host}"
    assert MARK not in masked(line), (line, masked(line))
