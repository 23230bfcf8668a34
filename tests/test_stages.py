"""Stages as docs/architecture.md says to add one: a stage declared in one place (here, this file) and
one line in the registry runs in `run` on real ranks, lands in run.json, gives a metric a rule
judges, and appears in the report's navigation; every stage's options are reachable as
--STAGE.OPTION as well as in one string."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from conftest import assert_one_line_error, run_cli

from clusterbench import argtypes, cli
from clusterbench.analyse.metrics import Metrics
from clusterbench.argtypes import option
from clusterbench.commands import run as run_command
from clusterbench.errors import UsageError
from clusterbench.report.blocks import Part, esc, section
from clusterbench.results.run import Run, Section
from clusterbench.runtime.rank import Rank
from clusterbench.shape import JobShape
from clusterbench.stages import registry
from clusterbench.stages.stage import Context, Stage


@dataclass(frozen=True)
class ToyOptions:
    """Its defaults are its own; `run` lays nothing under them."""

    greeting: str = option("hello", "--greeting", help="what every rank says")
    repeats: int = option(1, "--repeats", type=argtypes.whole(1), help="how many times")


@dataclass(frozen=True)
class ToyResult:
    """Its section of run.json, declared here beside it."""

    greeting: str
    ranks: int  # how many ranks took part in its collective


TOY_SECTION = Section("toy", ToyResult | None)


def resolve(opts: ToyOptions, context: Context) -> ToyOptions:
    if opts.greeting == "boom":
        raise UsageError("--toy.greeting boom: a toy that cannot work is refused before any rank starts")
    return opts


def work(rank: Rank, opts: ToyOptions) -> None:
    said = torch.ones(1)
    dist.all_reduce(said)  # every rank takes part, on the run's real process group
    if rank.folder is not None:
        rank.folder.record(toy=ToyResult(opts.greeting * opts.repeats, int(said.item())))


def metrics(run: Run, m: Metrics) -> None:
    toy = TOY_SECTION.of(run)
    if toy is not None:
        m.put("toy.ranks", toy.ranks, f"{toy.ranks} ranks said {toy.greeting}")


def report(run: Run, metrics: Metrics) -> list[Part]:
    toy = TOY_SECTION.of(run)
    return [] if toy is None else [Part("toy", "Toy", section("toy", "The toy stage", esc(toy.greeting)))]


TOY = Stage(name="toy", options=ToyOptions, resolve=resolve, work=work, sections=(TOY_SECTION,),
            metrics=metrics, report=report)


@pytest.fixture
def with_toy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "STAGES", (*registry.STAGES, TOY))  # the one registry line


def _rules(tmp_path: Path, criteria: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "rules.yaml"
    path.write_text(f'rules:\n  - name: toy ranks\n    metric: toy.ranks\n    criteria: "{criteria}"\n')
    return path


def _run(tmp_path: Path, criteria: str, *extra: str) -> tuple[int, Path]:
    out = tmp_path / "run"
    code = cli.main(["run", "--skip", "comm", "--skip", "train", "--peak-seconds", "0.05", "--nproc", "2",
                     "--rules", str(_rules(tmp_path, criteria)), "--out", str(out), *extra])
    return code, out


def test_a_new_stage_runs_lands_in_run_json_is_judged_and_reported(with_toy: None, tmp_path: Path) -> None:
    code, out = _run(tmp_path, "== 2", "--toy.greeting", "hi", "--toy.repeats", "2")
    assert code == 0
    doc = json.loads((out / "run.json").read_text())
    assert doc["toy"] == {"greeting": "hihi", "ranks": 2}
    assert doc["verdicts"] == [{"check": "toy ranks", "status": "PASS", "detail": "2 ranks said hihi"}]
    assert "toy" in [s["name"] for s in doc["telemetry"]["stages"]]
    html = (out / "report.html").read_text()
    assert '<a href="#toy">Toy</a>' in html and '<section id="toy"><h2>The toy stage</h2>hihi' in html


def test_a_new_stage_fails_by_its_rule_and_refuses_bad_options(with_toy: None, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(tmp_path, "== 3")
    assert code == 1
    assert json.loads((out / "run.json").read_text())["verdicts"][0]["status"] == "FAIL"
    code, out = _run(tmp_path / "boom", "== 2", "--toy.greeting", "boom")
    assert code == 2 and not out.exists()
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "clusterbench: error: --toy.greeting boom: a toy that cannot work is refused before any rank starts")


def _plans(*words: str, device: str = "cpu") -> dict[str, object]:
    args = cli.build_parser().parse_args(["run", *words])
    plan = run_command.prepare(args, JobShape(2, device, "gloo", 2))
    return {stage.name: p for stage, p in plan.stages}


def test_stage_options_are_typed_once_and_lie_over_run_defaults() -> None:
    plans = _plans("--skip", "train", "--peaks.dtypes", "float32,bfloat16", "--peak-seconds", "0.2",
                   "--comm.ops", "all_gather", "--comm.timing", "loop")
    assert plans["peaks"].dtypes == ("float32", "bfloat16") and plans["peaks"].seconds == 0.2
    assert plans["comm"].ops == ("all_gather",) and plans["comm"].timing == "loop"
    assert plans["comm"].options.max_bytes == 16 * 2**20  # run's CPU default, still under what was typed
    assert set(plans) == {"hardware", "peaks", "comm"}  # no train stage, so no canary either


def test_a_stage_option_given_twice_or_wrong_is_one_line() -> None:
    with pytest.raises(UsageError, match="--comm-args and --comm.ops both set ops"):
        _plans("--comm.ops", "all_reduce", "--comm-args", "--ops all_gather")
    with pytest.raises(UsageError, match="--pattern ring measures the sendrecv op"):
        _plans("--comm.pattern", "ring", "--comm.ops", "all_reduce")
    assert_one_line_error(run_cli("run", "--train.steps", "0"), 2, "argument --train.steps: must be at least 1")
