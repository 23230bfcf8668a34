"""What a stage declares: a stage of `run` (and perhaps a command of its own) is one package in stages/ whose
stage.py builds one Stage, and one line in clusterbench.stages.registry (docs/architecture.md).

A stage owns its options (a dataclass whose defaults are its own command's), turns what the user
gave into a plan once (resolve), does its work on every rank, fills its sections of run.json,
contributes metrics the rules judge, renders its parts of the report, and concludes after the
ranks (judging what only the whole run can, on the process that owns the run folder).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from clusterbench.analyse.metrics import Metrics
from clusterbench.argtypes import add_options
from clusterbench.errors import UsageError
from clusterbench.report.blocks import Part
from clusterbench.results.run import Run, Section
from clusterbench.shape import JobShape
from clusterbench.store.record import NodeResult

if TYPE_CHECKING:  # runtime/rank.py imports torch, and commands that only read run folders read stages too
    from clusterbench.runtime.rank import Rank

Options = TypeVar("Options")
Plan = TypeVar("Plan")


class NotRun(Exception):
    """Raised by resolve(): this stage leaves itself out of this run, saying why (None: nothing to say)."""

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason or "")
        self.reason = reason


# Named, not lambdas: a stage travels to spawned ranks by pickle, which names functions.
def _nothing(*args: Any) -> None:
    return None


def _no_parts(run: Run, metrics: Metrics) -> list[Part]:
    return []


def _no_defaults(shape: JobShape, quick: bool) -> dict[str, Any]:
    return {}


def _no_nodes(run: Run) -> list[NodeResult]:
    return []


def _no_plan(name: str) -> Any:
    return None


def _no_runs(path: Path) -> Run:
    raise UsageError(f"{path}: no run folder can be read here")


def as_given(options: Any, context: Context) -> Any:
    """The resolve() of a stage whose options need no resolving: its plan is its options."""
    return options


@dataclass(frozen=True)
class Context:
    """What a stage's resolve() knows before any rank starts."""

    shape: JobShape
    typed: frozenset[str] = frozenset()  # this stage's options the user typed, not defaults laid under them
    plan_of: Callable[[str], Any] = _no_plan  # another stage's plan in this run; None: it does not run
    load_run: Callable[[Path], Run] = _no_runs  # an earlier run's folder, read as the registry's sections read it


@dataclass(frozen=True)
class NoOptions:
    """The options of a stage that takes none."""


@dataclass(frozen=True)
class Stage(Generic[Options, Plan]):
    name: str  # --skip NAME, --NAME.option, telemetry's stage window, `clusterbench NAME` when it is a command
    options: type[Options]  # a dataclass; its defaults are those of the stage's own command
    resolve: Callable[[Options, Context], Plan]  # raises UsageError for what cannot work, NotRun to leave itself out
    work: Callable[[Rank, Plan], None]  # every rank; rank 0 (rank.folder) records
    sections: tuple[Section[Any], ...]  # its sections of run.json, declared beside its records
    metrics: Callable[[Run, Metrics], None] = _nothing  # the figures it adds to a run's metrics
    report: Callable[[Run, Metrics], list[Part]] = _no_parts  # its sections of report.html
    conclude: Callable[[Run, Plan], None] = _nothing  # after the ranks, on the process that owns the run folder
    nodes: Callable[[Run], list[NodeResult]] = _no_nodes  # the nodes it judged one by one, as the store keeps them
    run_defaults: Callable[[JobShape, bool], dict[str, Any]] = _no_defaults  # what `run` lays under the user's
    # options on this hardware (and with --quick)
    command: str | None = None  # the help of `clusterbench NAME`; None: a stage of `run` only
    checks: tuple[str, ...] = ()  # the default rules that decide its own command's exit code
    rules: Path | None = None  # its own default rules (a rules.yaml beside its stage.py), judged after the shared ones
    optional: bool = True  # `run --skip NAME` may leave it out
    writes_report: bool = False  # its own command renders report.html too (`run` always does)
    # Heavy modules its ranks import: local ranks fork from one process that imported them once.
    imports: tuple[str, ...] = ()

    def add_arguments(self, p: Any) -> None:
        """Its options, as its own command parses them (and `run`, under --NAME.), from their one declaration."""
        add_options(p, self.options)

    def ran(self, run: Run) -> bool:
        """Whether run.json holds anything of this stage's."""
        return any(section.held(run) for section in self.sections)
