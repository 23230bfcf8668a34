"""Passwords never printed: every URL password and password= value is masked, whatever characters users type
in them unescaped; user names, hosts and everything else stay as they were."""

from __future__ import annotations

import pytest

from clusterbench.secrets import masked, masked_argv


@pytest.mark.parametrize(("text", "shown"), [
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
])
def test_a_password_is_masked_and_nothing_else(text: str, shown: str) -> None:
    assert masked(text) == shown


def test_argv_keeps_its_shape() -> None:
    argv = ["clusterbench", "fleet", "--store=postgresql://u:hunter2@db/x", "--pushgateway", "https://a:b@gw"]
    assert masked_argv(argv) == ["clusterbench", "fleet", "--store=postgresql://u:***@db/x", "--pushgateway",
                                 "https://a:***@gw"]
    assert "hunter2" not in " ".join(masked_argv(argv))
