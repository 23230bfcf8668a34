"""The recipes of docs/architecture.md, each done here as the page says and followed through a real run:
a stage copied from a shipped one (peaks) into a folder of its own, with a rule of its own, and one line in
the registry; an op from its two entries; a rule from its one entry. (A node check from its entry and its
rule: tests/test_nodechecks.py.)

Each runs in a fresh interpreter, so its ranks fork from a process that holds the addition, as a team's
edit of the source would hold it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml
from conftest import read_run

from clusterbench.analyse.rules import default_rules_path

REPO = Path(__file__).resolve().parents[1]
PEAKS = REPO / "src" / "clusterbench" / "stages" / "peaks"


def _python(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True, text=True,
                          timeout=240, check=False)


def _copy_peaks(into: Path) -> Path:
    """stages/peaks copied as stages/gemm, renamed where a stage's name is its own (the package, the stage, its
    section, its metrics, its report's anchor), with a rule of its own beside its stage.py."""
    folder = into / "gemm"
    shutil.copytree(PEAKS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    for path in folder.glob("*.py"):
        text = path.read_text()
        for old, new in (("clusterbench.stages.peaks", "clusterbench.stages.gemm"), ('"peaks"', '"gemm"'),
                         ('"peaks.', '"gemm.'), ('f"peaks.', 'f"gemm.'), ("record(peaks=", "record(gemm=")):
            text = text.replace(old, new)
        if path.name == "stage.py":
            text = text.replace("optional=False,", 'optional=False, rules=Path(__file__).with_name("rules.yaml"),')
            text = text.replace("from __future__ import annotations\n",
                                "from __future__ import annotations\n\nfrom pathlib import Path\n")
        path.write_text(text)
    (folder / "rules.yaml").write_text(yaml.safe_dump({"rules": [
        {"name": "gemm float32", "metric": "gemm.matmul.float32.tflops", "criteria": "> 0"}]}))
    return folder


def test_a_stage_copied_from_peaks_runs_with_its_folder_and_one_registry_line(tmp_path: Path) -> None:
    _copy_peaks(tmp_path / "stages")
    out = tmp_path / "run"
    proc = _python("""
        import sys
        import clusterbench.stages
        clusterbench.stages.__path__.append(sys.argv[1])  # the new folder, as if it lay in stages/
        from clusterbench.stages import registry
        from clusterbench.stages.gemm.stage import PEAKS_STAGE as GEMM_STAGE
        registry.STAGES = (*registry.STAGES, GEMM_STAGE)  # the one registry line
        from clusterbench.cli import main
        sys.exit(main(["run", "--skip", "comm", "--skip", "train", "--nproc", "2", "--out", sys.argv[2],
                       "--peaks.seconds", "0.05", "--peaks.size", "128", "--gemm.seconds", "0.05",
                       "--gemm.size", "256", "--gemm.dtypes", "float32"]))
        """, str(tmp_path / "stages"), str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = read_run(out)
    assert [m["dtype"] for m in doc["gemm"]["matmul"]] == ["float32"]
    assert doc["gemm"]["matmul"][0]["n"] == 256 and doc["peaks"]["matmul"][0]["n"] == 128
    verdicts = {v["check"]: v for v in doc["verdicts"]}
    assert verdicts["gemm float32"]["status"] == "PASS"
    assert "comm correctness" in verdicts  # the shipped rules still judge, the new stage's come after them
    assert list(verdicts)[-1] == "gemm float32"
    assert '<section id="gemm">' in (out / "report.html").read_text()
    assert "gemm" in [s["name"] for s in doc["telemetry"]["stages"]]


def test_an_op_is_two_entries(tmp_path: Path) -> None:
    """all_gather through torch's list form, as a new op: its facts and its call, and the sweep, the check of what
    arrived, the table and the metrics follow."""
    proc = _python("""
        import sys
        import torch.distributed as dist
        from clusterbench.collectives import COLLECTIVES, Collective, Holds
        from clusterbench.stages.comm import ops
        COLLECTIVES["all_gather_list"] = Collective(
            "all_gather_list", busbw_factor=lambda n: (n - 1) / n, holds=Holds.ALL_CHUNKS, chunked=True,
            latency_steps=lambda n: n - 1)
        ops.OPS["all_gather_list"] = ops.Op(
            COLLECTIVES["all_gather_list"],
            buffers=lambda c: {"in": c.input(c.rank, c.chunk, c.rank * c.chunk), "out": c.empty(c.count)},
            run=lambda c, b: dist.all_gather(list(b["out"].split(c.chunk)), b["in"], group=c.group))
        from clusterbench.cli import main
        sys.exit(main(["comm", "--ops", "all_gather_list", "--nproc", "2", "--min-bytes", "1K",
                       "--max-bytes", "4K", "--iters", "2", "--warmup", "1", "--out", sys.argv[1]]))
        """, str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all_gather_list" in proc.stdout
    rows = read_run(tmp_path / "run")["comm"]
    assert {r["op"] for r in rows} == {"all_gather_list"} and len(rows) == 3
    assert all(r["wrong"] == 0 and r["busbw_gbps"] > 0 for r in rows)


def test_a_rule_is_one_entry(tmp_path: Path) -> None:
    """The shipped rules with one entry more: `run --rules` judges it beside the others."""
    rules = yaml.safe_load(default_rules_path().read_text())
    rules["rules"].append({"name": "peaks copy", "metric": "peaks.copy.gbps", "criteria": "> 1e9", "level": "WARN"})
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    out = tmp_path / "run"
    proc = _python("""
        import sys
        from clusterbench.cli import main
        sys.exit(main(["run", "--skip", "comm", "--skip", "train", "--nproc", "2", "--peaks.seconds", "0.05",
                       "--peaks.size", "128", "--rules", sys.argv[1], "--out", sys.argv[2]]))
        """, str(tmp_path / "rules.yaml"), str(out))
    verdicts = {v["check"]: v for v in read_run(out)["verdicts"]}
    assert proc.returncode == 0, proc.stdout + proc.stderr  # a WARN is no failure
    assert verdicts["peaks copy"]["status"] == "WARN" and "comm correctness" in verdicts
