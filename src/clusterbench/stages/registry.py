"""The stages of `run`, in the order they run: a new stage is one package in stages/ and one line here.

Everything that walks the stages walks STAGES: `run` and the single-stage commands, the sections of run.json
every run folder is read and written with, the metrics of a run, and the sections of its report
(docs/architecture.md).
"""

from __future__ import annotations

from pathlib import Path

from clusterbench.analyse import verdicts
from clusterbench.analyse.metrics import Metrics, run_wide
from clusterbench.analyse.rules import Rule, load_rules, shared_rules
from clusterbench.nccl.records import NCCL
from clusterbench.report import html
from clusterbench.report.blocks import Part
from clusterbench.report.expected import expected_section
from clusterbench.results.documents import write_text
from clusterbench.results.folder import RunFolder
from clusterbench.results.run import Run, Section, Verdict, table
from clusterbench.stages.burnin.stage import BURNIN_STAGE
from clusterbench.stages.canary.stage import CANARY_STAGE
from clusterbench.stages.comm.stage import COMM_STAGE
from clusterbench.stages.fleet.stage import FLEET_STAGE
from clusterbench.stages.hardware.stage import HARDWARE_STAGE
from clusterbench.stages.peaks.stage import PEAKS_STAGE
from clusterbench.stages.stage import Stage
from clusterbench.stages.train.stage import TRAIN_STAGE
from clusterbench.telemetry.records import TELEMETRY

STAGES: tuple[Stage, ...] = (
    HARDWARE_STAGE,
    PEAKS_STAGE,
    FLEET_STAGE,
    COMM_STAGE,
    CANARY_STAGE,
    TRAIN_STAGE,
    BURNIN_STAGE,
)

def sections() -> dict[str, Section]:
    """Every section of run.json: each stage's, then the run-time's (the telemetry of every rank command, NCCL's
    log read after one)."""
    return table([*(section for stage in STAGES for section in stage.sections), TELEMETRY, NCCL])


def run_folder(path: str | Path) -> RunFolder:
    """A run folder, read and written with every section this clusterbench knows."""
    return RunFolder(path, sections())


def load_run(path: str | Path) -> Run:
    """The run of a folder (or of its run.json); UsageError in one line for one that is missing, half-written or
    unreadable."""
    return run_folder(path).load()


def metrics_of(run: Run) -> Metrics:
    """Every metric this run holds, with its notes and the reasons for those it lacks."""
    m = Metrics()
    for stage in STAGES:
        if not stage.ran(run):
            m.not_run[stage.name] = f"the {stage.name} stage did not run"
        stage.metrics(run, m)
    run_wide(run, m)
    return m


def default_rules() -> list[Rule]:
    """The rules `run` judges with unless given --rules: the shared default_rules.yaml, then each stage's own."""
    return shared_rules() + [rule for stage in STAGES if stage.rules for rule in load_rules(stage.rules)]


def judge(run: Run, rules: list[Rule] | None = None, metrics: Metrics | None = None) -> list[Verdict]:
    """The run judged now by the rules (the default ones unless given)."""
    return verdicts.judge(metrics or metrics_of(run), run.expected, rules if rules is not None else default_rules())


def report_parts(run: Run, metrics: Metrics, run_dir: Path | None = None) -> list[Part]:
    """The report's sections after the verdicts: the expected figures, each stage's, then the telemetry
    (plotted from run_dir's telemetry.csv when there is one)."""
    from clusterbench.telemetry.report import (  # matplotlib: only where a report is rendered
        plot_count,
        telemetry_section,
    )

    parts = [Part("expected", "Expected", expected_section(run, metrics))] \
        if run.expected or run.expected_note else []
    parts += [part for stage in STAGES for part in stage.report(run, metrics)]
    if TELEMETRY.of(run):
        parts.append(Part("telemetry", "Telemetry", telemetry_section(run, run_dir),
                          plot_count(run)))
    return parts


def shown_verdicts(run: Run, metrics: Metrics | None = None) -> list[Verdict]:
    """The verdicts a report shows: run.json's own (`clusterbench run` keeps them), else the default checks
    judged now."""
    return run.verdicts or judge(run, metrics=metrics)


def page(run: Run, run_dir: Path | None = None) -> str:
    """The report of a run (run_dir: where its telemetry.csv may lie)."""
    metrics = metrics_of(run)
    return html.page(run, shown_verdicts(run, metrics), report_parts(run, metrics, run_dir))


def expected_plots(run: Run, run_dir: Path | None = None) -> int:
    """How many plots the report of this run holds, each section counting from the data it draws."""
    return sum(part.plots for part in report_parts(run, metrics_of(run), run_dir))


def render_report(run_dir: str | Path, run: Run | None = None) -> Path:
    """Write <run_dir>/report.html from the run (read from <run_dir>/run.json unless given).

    Raises UsageError (from RunFolder.load) for a missing, half-written or unreadable run folder.
    """
    run = run if run is not None else load_run(run_dir)
    folder = Path(run_dir)
    folder = folder if folder.is_dir() else folder.parent
    return write_text(folder / html.REPORT_NAME, page(run, folder), "report")
