"""One self-contained report.html per run folder, rendered from run.json alone.

Self-contained means it opens offline from anywhere: one inline CSS block, plots as
inline SVG (see report.plots for why), system fonts, no script and no URL to fetch. Each
section appears only when run.json holds its data, so the same renderer serves `comm`,
`info`, `train` and `run` folders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clusterbench.report import comm, train
from clusterbench.report.blocks import STATUSES, badge, esc, section
from clusterbench.report.hardware import hardware_section, peaks_section
from clusterbench.report.style import CSS
from clusterbench.results import atomic_write, load_run
from clusterbench.suite.verdicts import judge

REPORT_NAME = "report.html"


def render_report(run_dir: str | Path) -> Path:
    """Write <run_dir>/report.html from <run_dir>/run.json and return its path.

    Raises UsageError (from results.load_run) for a missing, half-written or
    other-schema run folder.
    """
    doc = load_run(run_dir)
    folder = Path(run_dir)
    folder = folder if folder.is_dir() else folder.parent
    path = folder / REPORT_NAME
    atomic_write(path, page(doc))
    return path


def expected_plots(doc: dict[str, Any]) -> int:
    """How many inline SVG plots page(doc) holds; the browser test checks the DOM against it."""
    return comm.plot_count(doc) + (train.plot_count(doc["train"]) if doc.get("train") else 0)


def verdicts(doc: dict[str, Any]) -> list[dict[str, str]]:
    """run.json's own verdicts (`clusterbench run` writes them), else the same checks judged now."""
    return doc.get("verdicts") or judge(doc)


def page(doc: dict[str, Any]) -> str:
    found = verdicts(doc)
    parts = [_verdict_section(found)]
    if doc.get("hardware"):
        parts.append(hardware_section(doc["hardware"]))
    if doc.get("peaks"):
        parts.append(peaks_section(doc["peaks"], doc.get("hardware")))
    if doc.get("comm"):
        parts.append(comm.comm_section(doc))
    if doc.get("train"):
        parts.append(train.train_section(doc["train"]))
    anchors = [("verdicts", "Verdicts"), ("hardware", "Hardware"), ("peaks", "Peaks"),
               ("comm", "Communication"), ("train", "Fine-tuning")]
    body = "".join(parts)
    nav = "".join(f'<a href="#{a}">{t}</a>' for a, t in anchors if f'<section id="{a}"' in body)
    env = doc.get("env") or {}
    title = f"clusterbench {doc.get('command', '')} on {env.get('hostname', '?')}"
    meta = (f"<b>{esc(doc.get('started_utc'))}</b> → <b>{esc(doc.get('finished_utc'))}</b> · status "
            f"<b>{esc(doc.get('status'))}</b> · clusterbench {esc(doc.get('version'))} · "
            f"<code>{esc(' '.join(doc.get('argv') or []))}</code>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{esc(title)}</title>
<style>{CSS}</style></head>
<body><header class="top"><h1>{esc(title)}</h1><div class="meta">{meta}</div><nav>{nav}</nav></header>
<main>{body}<footer>Rendered from run.json by <code>clusterbench report</code>.
Figures and rules: REFERENCE.md of clusterbench.</footer></main></body></html>
"""


def _verdict_section(found: list[dict[str, str]]) -> str:
    worst = max((STATUSES.index(v["status"]) for v in found if v["status"] in STATUSES), default=0)
    overall = STATUSES[worst]
    items = "".join(
        f'<div class="verdict {v["status"].lower()}">{badge(v["status"])}<span class="check">{esc(v["check"])}</span>'
        f'<div class="detail">{esc(v.get("detail"))}</div></div>'
        for v in found
    )
    return section("verdicts", "Verdicts", f'<div class="verdicts">{items}</div>',
                   lead=f"Overall {badge(overall)}: the worst of the checks below.")
