"""Small HTML building blocks shared by the report's sections. Every value is escaped here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

STATUSES = ("PASS", "WARN", "FAIL")


def esc(value: Any) -> str:
    return escape("-" if value is None else str(value))


def num(value: float | None, digits: int = 3) -> str:
    """A number with `digits` significant digits, "-" when unknown."""
    if value is None:
        return "-"
    return f"{value:.{digits}g}" if abs(value) < 10**digits else f"{value:,.0f}"


def pct(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value * 100:.{digits}f} %"


def badge(status: str) -> str:
    kind = status.lower() if status in STATUSES else "info"
    return f'<span class="badge {kind}">{esc(status)}</span>'


def card(label: str, value: str, sub: str = "") -> str:
    """A big figure with its label; `value` and `sub` are HTML (already escaped)."""
    sub_html = f'<div class="sub">{sub}</div>' if sub else ""
    return f'<div class="card"><div class="label">{esc(label)}</div><div class="value">{value}</div>{sub_html}</div>'


def cards(items: Iterable[str]) -> str:
    return f'<div class="cards">{"".join(items)}</div>'


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], numeric_from: int = 1, cls: str = "") -> str:
    """A table of HTML cells; columns from `numeric_from` on are right-aligned numbers."""
    def cells(row: Sequence[str], tag: str) -> str:
        return "".join(
            f'<{tag}{" class=num" if i >= numeric_from else ""}>{cell}</{tag}>' for i, cell in enumerate(row)
        )

    body = "".join(f"<tr>{cells(row, 'td')}</tr>" for row in rows)
    head = cells([esc(h) for h in headers], "th")
    return f'<div class="scroll"><table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def facts(pairs: Iterable[tuple[str, str]]) -> str:
    """A definition grid of label -> HTML value."""
    items = "".join(f"<div><dt>{esc(k)}</dt><dd>{v}</dd></div>" for k, v in pairs)
    return f'<dl class="facts">{items}</dl>'


def sentence(text: str) -> str:
    """Words written for the middle of a line ("no theoretical line: ...") as a sentence of their own."""
    return text[:1].upper() + text[1:] + "."


def note(text_html: str, kind: str = "info") -> str:
    return f'<p class="note {kind}">{text_html}</p>'


def details(summary: str, html: str) -> str:
    """A collapsed block: long tables stay one click away instead of filling the page."""
    return f"<details><summary>{esc(summary)}</summary>{html}</details>"


def section(anchor: str, title: str, body: str, lead: str = "") -> str:
    lead_html = f'<p class="lead">{lead}</p>' if lead else ""
    return f'<section id="{anchor}"><h2>{esc(title)}</h2>{lead_html}{body}</section>'


@dataclass(frozen=True)
class Part:
    """One section of the page: its anchor and title in the navigation, its HTML (a section() with that
    anchor), and how many plots it draws, counted from the data (the browser test holds the page to it)."""

    anchor: str
    title: str
    html: str
    plots: int = 0
