"""A slow rank in training: one of two real gloo ranks, started as torchrun would start it, is held to
a tenth of a CPU by a cgroup quota; the run names it, with its phases adding up to the step.
The healthy side (no straggler named on a healthy 2-rank run) is asserted on test_train.py's run."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from beds import cpu_quota
from conftest import finish, read_run, start_nodes

from clusterbench.analyse.metrics import Metrics
from clusterbench.analyse.rules import evaluate
from clusterbench.stages.registry import default_rules, expected_plots, load_run, render_report
from clusterbench.stages.train import display, stragglers
from clusterbench.stages.train.metrics import metrics
from clusterbench.stages.train.records import TRAIN, RankPhases

ARGS = ["train", "--steps", "3", "--seq-len", "32", "--global-batch", "8", "--warmup-steps", "1",
        "--peak-tflops", "1"]
# A fiftieth of a CPU: at a tenth, a CI runner whose other tests slowed rank 0 as well saw the throttled rank
# compute only 1.68x as long, at a twenty-fifth 1.98x once (rank 0 at 0.55 s a step, ten times its own pace),
# while the unloaded machine here saw 4.4x to 8.2x.
QUOTA = 0.02
RULE = "slow rank"


def _popen(node: int, argv: list[str], env: dict[str, str], **kw) -> subprocess.Popen:
    return subprocess.Popen(argv, env={**os.environ, **env}, **kw)


@pytest.fixture(scope="module")
def throttled(tmp_path_factory) -> tuple[Path, str]:
    """A 2-rank run whose rank 1 is held to a fiftieth of a CPU from rank 0's header (printed right before the
    first step) to its summary (printed after the ranks' phases are gathered): its start-up and its exit under
    the quota would take longer than the test may. The run folder and rank 0's output."""
    out = tmp_path_factory.mktemp("straggler") / "run"
    said = []
    with cpu_quota(QUOTA) as starve:
        procs = start_nodes(2, [*ARGS, "--out", str(out)], popen=_popen)
        lines = iter(procs[0].stdout)
        for line in lines:
            said.append(line)
            if line.startswith("# clusterbench train"):
                starve(procs[1].pid)
            if line.startswith("# steps"):
                break
    said += lines  # to its end through the same reader: lines it read ahead are in its buffer, not the pipe
    done = finish(procs, timeout=120)
    assert [p.returncode for p in done] == [0, 0], done[0].stderr + done[1].stderr
    return out, "".join(said)


def test_the_throttled_rank_is_named_with_its_phases_adding_up(throttled) -> None:
    out, stdout = throttled
    doc = read_run(out)
    ranks = [RankPhases(**r) for r in doc["train"]["phases"]]
    assert [(p.rank, p.node, p.device) for p in ranks] == [(0, ranks[0].node, "cpu"), (1, ranks[1].node, "cpu")]
    assert ranks[0].node != ranks[1].node  # GROUP_RANK told the two "nodes" apart
    window = [r["seconds"] for r in doc["train_steps"] if r["in_window"]]
    step = sum(window) / len(window)
    assert ranks[0].step_s == pytest.approx(step, rel=0.01)  # rank 0's own clock: the same steps
    assert ranks[1].step_s == pytest.approx(step, rel=0.05)  # in lockstep, but its steps end a little apart
    slow, fast = ranks[1], ranks[0]
    assert slow.compute_s > 2 * fast.compute_s and fast.sync_s > slow.sync_s

    run = load_run(out)
    m = Metrics()
    metrics(run, m)
    assert m.values["train.straggler.compute_ratio"] == pytest.approx(slow.compute_s / fast.compute_s)
    assert m.values["train.straggler.wait_share"] == pytest.approx(fast.sync_s / fast.step_s)
    (verdict,) = [r for r in evaluate(default_rules(), m) if r.rule == RULE]
    assert verdict.verdict == "WARN", verdict
    assert f"rank 1 (node {slow.node}, cpu) computes" in verdict.detail
    assert "of each step in gradient sync" in verdict.detail
    assert f"slowest rank: rank 1 (node {slow.node}, cpu)" in stdout


def test_the_report_draws_every_rank_and_names_the_straggler(throttled) -> None:
    out, _ = throttled
    run = load_run(out)
    html = Path(render_report(out, run)).read_text()  # as `clusterbench report` renders it
    assert 'data-plot="train-phases"' in html and "Step time by rank" in html
    assert html.count('<svg class="plot"') == expected_plots(run)  # the loss and the phases
    assert "Slowest rank: rank 1 (node " in html


def test_a_run_json_without_phases_still_reads(throttled, tmp_path: Path) -> None:
    """run.json from before the phases were recorded: read, and the straggler metric absent with a reason."""
    out, _ = throttled
    text = (out / "run.json").read_text()
    old = tmp_path / "run.json"
    doc = json.loads(text)
    del doc["train"]["phases"]
    old.write_text(json.dumps(doc))
    run = load_run(old)
    assert TRAIN.of(run).phases == []
    m = Metrics()
    metrics(run, m)
    assert "train.straggler.compute_ratio" not in m.values
    assert m.absent["train.straggler.compute_ratio"] == "no per-rank phases in this run's train section"


def _ranks(*computes: float) -> list[RankPhases]:
    return [RankPhases(rank=i, node=f"n{i}", device="cpu", data_s=0.001, forward_s=c / 3, backward_s=2 * c / 3,
                       sync_s=0.5 - c, optimizer_s=0.1) for i, c in enumerate(computes)]


def test_the_slowest_rank_is_judged_against_the_median_of_the_others() -> None:
    found = stragglers.find(_ranks(0.1, 0.12, 0.4, 0.1))
    assert found.slowest.rank == 2 and found.ratio == pytest.approx(0.4 / 0.1)
    assert found.phase == "backward" and found.others_wait_s == pytest.approx(0.4)
    assert stragglers.judge_reason(_ranks(0.1), "ddp") == "one rank: no other rank to wait for it"
    assert "all-gather" in stragglers.judge_reason(_ranks(0.1, 0.2), "fsdp")
    assert stragglers.judge_reason(_ranks(0.1, 0.2), "ddp") is None


def test_a_large_job_prints_its_slowest_ranks_not_every_rank() -> None:
    ranks = [RankPhases(rank=r, node=f"node{r // 8}", device=f"cuda:{r % 8}", data_s=0.001, forward_s=0.1,
                        backward_s=0.2 + (0.1 if r == 37 else 0.0), sync_s=0.05, optimizer_s=0.01) for r in range(64)]
    lines = display.phases(ranks, "ddp").splitlines()
    assert lines[0].startswith(f"# step the {display.PHASE_ROWS} slowest of 64 ranks by compute")
    assert len(lines) == display.PHASE_ROWS + 2 and lines[1].startswith("  rank 37  node4 cuda:5")
    assert "slowest rank: rank 37 (node node4, cuda:5) computes 1.33x" in lines[-1]
