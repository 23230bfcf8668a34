"""One self-contained report.html per run folder: the verdicts, then the sections it is handed.

Self-contained means it opens offline from anywhere: one inline CSS block, plots as
inline SVG (see report.plots for why), system fonts, no script and no URL to fetch. The
sections come from the stages (clusterbench.stages.registry walks them), each present only when
run.json holds its data, so the same page serves `comm`, `info`, `train` and `run` folders;
the navigation lists the sections the page holds, in order.
"""

from __future__ import annotations

from clusterbench.analyse.verdicts import overall
from clusterbench.report.blocks import Part, badge, esc, section
from clusterbench.report.style import CSS
from clusterbench.results.run import Run, Verdict
from clusterbench.units import ranks_text

REPORT_NAME = "report.html"


def page(run: Run, verdicts: list[Verdict], parts: list[Part]) -> str:
    """The page: the verdicts, then each part, under a navigation of their anchors."""
    parts = [Part("verdicts", "Verdicts", _verdict_section(verdicts)), *parts]
    body = "".join(p.html for p in parts)
    nav = "".join(f'<a href="#{p.anchor}">{esc(p.title)}</a>' for p in parts)
    title = f"clusterbench {run.command} on {run.env.hostname or '?'}"
    meta = (f"<b>{esc(run.started_utc)}</b> → <b>{esc(run.finished_utc)}</b> · status "
            f"<b>{esc(run.status)}</b> · clusterbench {esc(run.version)} · {_job(run)}"
            f"<code>{esc(' '.join(run.argv))}</code>")
    return document(title, meta, body, "run.json by <code>clusterbench report</code>", f"<nav>{nav}</nav>")


def document(title: str, meta_html: str, body_html: str, source_html: str, nav_html: str = "") -> str:
    """A self-contained page of clusterbench's: its header, the body, and a footer naming what it was rendered from."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{esc(title)}</title>
<style>{CSS}</style></head>
<body><header class="top"><h1>{esc(title)}</h1><div class="meta">{meta_html}</div>{nav_html}</header>
<main>{body_html}<footer>Rendered from {source_html}.
Every formula and rule: docs/methodology.md of clusterbench.</footer></main></body></html>
"""


def _job(run: Run) -> str:
    """Where the ranks ran: "4 ranks on 2 nodes: a (ranks 0-1, cuda:0-1), ..."."""
    if not run.env.ranks:
        return ""
    nodes: dict[str, list[int]] = {}
    for p in run.env.ranks:
        nodes.setdefault(p.node, []).append(p.rank)
    where = ", ".join(f"{node} ({ranks_text(ranks)})" for node, ranks in nodes.items())
    return f"{len(run.env.ranks)} ranks on {len(nodes)} node{'s' * (len(nodes) > 1)}: {esc(where)} · "


def _verdict_section(found: list[Verdict]) -> str:
    items = "".join(
        f'<div class="verdict {v.status.lower()}">{badge(v.status)}<span class="check">{esc(v.check)}</span>'
        f'<div class="detail">{esc(v.detail)}</div></div>'
        for v in found
    )
    return section("verdicts", "Verdicts", f'<div class="verdicts">{items}</div>',
                   lead=_overall(overall(found)))


def _overall(verdict: str | None) -> str:
    if verdict is None:
        return "Nothing judged: every check below was skipped, so there is no overall verdict."
    return f"Overall {badge(verdict)}: the worst of the checks below."
