"""Credentials masked in anything clusterbench prints or keeps: a URL's password (postgresql://USER:PASSWORD@...,
a Pushgateway's https://USER:PASSWORD@..., USER:PASSWORD@HOST written without a scheme) and a `password=`
parameter become ***. Applied to every error line (argparse's too), every URL shown, the argv kept in run.json
and the store's records, so a secret typed on the command line never reaches a terminal, a log or a shared file.

Users type secrets unescaped, with @ : / ? # and spaces in them, and a line may quote a URL whole, cut or
among other words: where a password ends cannot always be told, and masking too much of a line is the safe
side, so a URL's password runs to the last @ that could end it.
"""

from __future__ import annotations

import re

MASK = "***"

# scheme:// , or scheme:/ where a reader showed the URL as a path (which folds // into /).
_SCHEME = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://?")
# USER:SECRET as a word of its own whose @ comes later in the line: a password with a space in it.
_SPACED = re.compile(r"""(?:^|(?<=[\s'"=,/]))(?P<user>[^\s'"/:@=,()\[\]]*):(?!//)[^\s@]+(?=\s)""")
# A libpq keyword that holds a secret: password=, sslpassword=, passfile= anywhere (a URL's query, a conninfo
# string), quoted or not.
_KEYWORD = re.compile(r"""(?P<key>\b(?:ssl)?password|\bpassfile)=(?P<secret>"[^"]*"?|'[^']*'?|[^\s&;]*)""",
                      re.IGNORECASE)
# USER:SECRET@HOST with no scheme, as a word or the last part of a path (argparse repeats a value as typed; a
# reader shows it as a path): the secret runs to the word's last @. Not "//..." after the colon: that is a
# scheme, which the URL rule takes.
_BARE = re.compile(r"""(?:^|(?<=[\s'"=(\[,/]))(?P<user>[^\s'"/:@=,()\[\]]*):(?!//)"""
                   r"""(?P<secret>\S*)@(?=[^@\s]*(?:\s|$))""")


def _mask_urls(line: str) -> str:
    """Each scheme://USER:PASSWORD@ of one line masked. The user part ends at its first colon, which must stand
    in the URL's first word; the password at the last @ before the line's next URL (a password may hold an
    @ or a space), or where that URL begins in the first word (a password holding a "://"), the line's last @."""
    pieces, done = [], 0
    for url in _SCHEME.finditer(line):
        start = url.end()
        if start <= done:  # a "://" inside a password already masked
            continue
        following = _SCHEME.search(line, start)
        region_end = following.start() if following else len(line)
        word_end = next((j for j in range(start, len(line)) if line[j].isspace()), len(line))
        at = line.rfind("@", start, region_end)
        if at < 0 and region_end < word_end:
            at = line.rfind("@", start)
        colon = line.find(":", start, at) if at >= 0 else -1
        # No password: USER@HOST, [IPV6]:PORT; or the URL ends its word with a colon ("store URL: why ... a@b").
        if colon < 0 or colon >= word_end - (at >= word_end) or "[" in line[start:colon]:
            continue
        pieces.append(line[done:colon + 1] + MASK)
        done = at
    return "".join(pieces) + line[done:]


def _mask_spaced(line: str) -> str:
    """USER:PASS WORD@HOST without a scheme (argparse joins the words it repeats with spaces): masked to the
    line's last @ before its next URL."""
    for word in _SPACED.finditer(line):
        following = _SCHEME.search(line, word.end())
        at = line.rfind("@", word.end(), following.start() if following else len(line))
        if at >= 0:
            colon = word.start() + len(word["user"])
            return line[:colon + 1] + MASK + _mask_spaced(line[at:])
    return line


def masked(text: str) -> str:
    """`text` with every URL password and password= value replaced by ***."""
    if "@" not in text and "=" not in text:
        return text
    text = "\n".join(_mask_spaced(_mask_urls(line)) for line in text.split("\n"))
    text = _BARE.sub(lambda m: f"{m['user']}:{MASK}@", text)
    return _KEYWORD.sub(lambda m: f"{m['key']}={MASK}", text)


def masked_argv(argv: list[str] | tuple[str, ...]) -> list[str]:
    return [masked(a) for a in argv]
