"""Credentials masked in anything clusterbench prints or keeps: a URL's password (postgresql://USER:PASSWORD@...,
a Pushgateway's https://USER:PASSWORD@...) and a `password=` parameter become ***. Applied to every error
line, every URL shown, the argv kept in run.json and the store's records, so a secret typed on the command
line never reaches a terminal, a log or a shared file.
"""

from __future__ import annotations

import re

MASK = "***"

# scheme://USER:PASSWORD@ : the password is whatever runs from the first colon after // to the last @ of the
# word (users type passwords unescaped, with @ : / ? # in them; masking too much of a word is the safe side).
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:@/\s?#]*):(?P<secret>\S*)@(?=[^@\s]*(?:\s|$))")
# A bare USER@ whose "user" is a secret nobody meant to show cannot be told from a user name; a libpq
# keyword is: password=, sslpassword=, passfile= anywhere (a URL's query, a conninfo string), quoted or not.
_KEYWORD = re.compile(r"""(?P<key>\b(?:ssl)?password|\bpassfile)=(?P<secret>"[^"]*"?|'[^']*'?|[^\s&;]*)""",
                      re.IGNORECASE)


def masked(text: str) -> str:
    """`text` with every URL password and password= value replaced by ***."""
    if "@" not in text and "=" not in text:
        return text
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    return _KEYWORD.sub(lambda m: f"{m['key']}={MASK}", text)


def masked_argv(argv: list[str] | tuple[str, ...]) -> list[str]:
    return [masked(a) for a in argv]
