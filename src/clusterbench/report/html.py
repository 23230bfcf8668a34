"""One self-contained report.html per run folder, rendered from run.json alone.

Self-contained means it opens offline from anywhere: one inline CSS block, plots as
inline SVG (see report.plots for why), system fonts, no script and no URL to fetch. Each
section appears only when run.json holds its data, so the same renderer serves `comm`,
`info`, `train` and `run` folders.
"""

from __future__ import annotations

from pathlib import Path

from clusterbench.analyse.metrics import metrics_of
from clusterbench.analyse.verdicts import judge, overall
from clusterbench.report import comm, model, telemetry, train
from clusterbench.report.blocks import badge, esc, section
from clusterbench.report.expected import expected_section
from clusterbench.report.hardware import hardware_section, peaks_section
from clusterbench.report.pairs import pairs_section
from clusterbench.report.placement import placement_section
from clusterbench.report.style import CSS
from clusterbench.results.documents import write_text
from clusterbench.results.folder import load_run
from clusterbench.results.schema import Run, Verdict
from clusterbench.units import ranks_text

REPORT_NAME = "report.html"
CANARY_LEAD = ("The tiny float32 task with TF32 off, trained on this hardware and held against the curve it "
               "makes on CPUs: a device that computes wrong numbers departs from it (docs/methodology.md §5).")


def render_report(run_dir: str | Path, run: Run | None = None) -> Path:
    """Write <run_dir>/report.html from the run (read from <run_dir>/run.json unless given).

    Raises UsageError (from load_run) for a missing, half-written or unreadable run folder.
    """
    run = run if run is not None else load_run(run_dir)
    folder = Path(run_dir)
    folder = folder if folder.is_dir() else folder.parent
    return write_text(folder / REPORT_NAME, page(run, folder), "report")


def expected_plots(run: Run) -> int:
    """How many inline SVG plots page(run) holds; the browser test checks the DOM against it."""
    return (comm.plot_count(run) + model.plot_count(run) + bool(run.pairs)
            + sum(train.plot_count(t) for t in (run.canary, run.train) if t)
            + telemetry.plot_count(run))


def verdicts(run: Run) -> list[Verdict]:
    """run.json's own verdicts (`clusterbench run` writes them), else the default checks judged now."""
    return run.verdicts or judge(run)


def page(run: Run, run_dir: Path | None = None) -> str:
    """The report; run_dir is where telemetry.csv may lie (without it, telemetry is plotted from run.json)."""
    parts = [_verdict_section(verdicts(run))]
    metrics = metrics_of(run)
    if run.expected or run.expected_note:
        parts.append(expected_section(run, metrics))
    if run.hardware:
        parts.append(hardware_section(run.hardware))
    if any(p.cpus for p in run.env.ranks):
        parts.append(placement_section(run, metrics))
    if run.peaks:
        parts.append(peaks_section(run.peaks, run.hardware))
    if run.comm:
        parts.append(comm.comm_section(run, metrics))
    if run.model:
        parts.append(model.model_section(run))
    if run.pairs:
        parts.append(pairs_section(run))
    if run.canary:
        parts.append(train.train_section(run.canary, "canary", "Numerics canary", CANARY_LEAD))
    if run.train:
        parts.append(train.train_section(run.train))
    if run.telemetry:
        parts.append(telemetry.telemetry_section(run, run_dir))
    anchors = [("verdicts", "Verdicts"), ("expected", "Expected"), ("hardware", "Hardware"),
               ("placement", "Placement"), ("peaks", "Peaks"),
               ("comm", "Communication"), ("model", "Model"), ("pairs", "Pairwise links"), ("canary", "Canary"),
               ("train", "Fine-tuning"), ("telemetry", "Telemetry")]
    body = "".join(parts)
    nav = "".join(f'<a href="#{a}">{t}</a>' for a, t in anchors if f'<section id="{a}"' in body)
    title = f"clusterbench {run.command} on {run.env.hostname or '?'}"
    meta = (f"<b>{esc(run.started_utc)}</b> → <b>{esc(run.finished_utc)}</b> · status "
            f"<b>{esc(run.status)}</b> · clusterbench {esc(run.version)} · {_job(run)}"
            f"<code>{esc(' '.join(run.argv))}</code>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{esc(title)}</title>
<style>{CSS}</style></head>
<body><header class="top"><h1>{esc(title)}</h1><div class="meta">{meta}</div><nav>{nav}</nav></header>
<main>{body}<footer>Rendered from run.json by <code>clusterbench report</code>.
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
