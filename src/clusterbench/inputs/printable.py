"""Text from outside (a file name, a host, a value in a store) as clusterbench prints it: what is not printable (a
newline, a tab, a terminal's escape, a byte of a file name that is no UTF-8) escaped as Python writes it, so that
what is printed is one line per line it means, and says only what it says."""

from __future__ import annotations


def printable(text: str) -> str:
    return text if text.isprintable() else "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
