"""The expected-figures section: each figure against what systems like this one measure, and its link."""

from __future__ import annotations

from clusterbench.analyse.metrics import Metrics, bandwidth_unit
from clusterbench.report.blocks import esc, note, num, pct, section, sentence, table
from clusterbench.results.run import Expected, Run
from clusterbench.stages.comm.records import COMM_OPTIONS, CommOptions
from clusterbench.units import BANDWIDTH_UNITS


def figure_text(name: str, value: float, unit: str) -> str:
    """A metric's value in the unit people read it in: bandwidth in the run's unit, MFU in %."""
    if bandwidth_unit(name) == "GB/s":
        return f"{num(value, 4)} GB/s"
    if bandwidth_unit(name) == "Gbps":
        label, scale = BANDWIDTH_UNITS[unit]
        return f"{num(value * scale, 4)} {label}"
    if name.endswith(".mfu") or name.endswith(".hfu"):
        return pct(value)
    if name.endswith(".tflops") or name.endswith("tflops_per_device"):
        return f"{num(value, 4)} TFLOP/s"
    if name.endswith(".tgs"):
        return f"{num(value, 4)} tokens/GPU/s"
    return num(value, 4)


def _expected_text(name: str, e: Expected, unit: str) -> str:
    text = figure_text(name, e.value, unit)
    if e.low is not None and e.high is not None:
        text += f" ({figure_text(name, e.low, unit)} to {figure_text(name, e.high, unit)})"
    return text


def _link_share(name: str, metrics: Metrics) -> str:
    """The share of the link's theoretical figure, for an op's busbw at its largest sizes."""
    if not name.startswith("comm.") or not name.endswith(".busbw_gbps.top"):
        return "-"
    op = name.split(".")[1]
    share = metrics.values.get(f"comm.{op}.link_share")
    return "-" if share is None else pct(share, 0)


def expected_section(run: Run, metrics: Metrics) -> str:
    unit = (COMM_OPTIONS.of(run) or CommOptions()).unit
    rows = []
    for name, e in sorted(run.expected.items()):
        value = metrics.values.get(name)
        share = "-" if value is None else pct(value / e.value, 0)
        origin = {"given": "given (--expect-busbw)", "file": "your file", "shipped": "published"}[e.origin]
        rows.append([f"<code>{esc(name)}</code>",
                     esc(e.system) + (f"<br><small>{esc(e.note)}</small>" if e.note else ""),
                     f"{esc(e.source)}<br><small>{origin}</small>",
                     "-" if value is None else esc(figure_text(name, value, unit)),
                     esc(_expected_text(name, e, unit)), share, _link_share(name, metrics)])
    body = ""
    if rows:
        body = table(["figure", "measured on", "source", "this run", "systems like this measure", "of that",
                      "of the link's theoretical"], rows, numeric_from=3)
    if run.expected_note:
        body += note(esc(sentence(run.expected_note)))
    if not rows:
        body += note("No figure of this run is compared with published measurements: no guess is made. Add your "
                     "fleet's figures with <code>--expected FILE</code> (the form of the shipped "
                     "<code>expected_figures.yaml</code>, or a <code>clusterbench baseline</code> file).")
    lead = ("Is this number normal? Each figure against what systems like this one measured (published "
            "measurements, matched by the hardware picture, or your own), beside its share of the link's "
            "theoretical figure.")
    return section("expected", "Expected figures", body, lead=lead)
