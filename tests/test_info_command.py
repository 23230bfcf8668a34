"""`clusterbench info` on this machine (no GPU here), and the picture every rank command records."""

import json
from pathlib import Path

from conftest import read_run


def test_info_prints_the_picture_and_keeps_it(cli, tmp_path: Path) -> None:
    proc = cli("info", "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("host ")
    assert "versions python" in proc.stdout
    doc = read_run(tmp_path / "run")
    assert (doc["command"], doc["status"]) == ("info", "complete")
    assert doc["hardware"]["cpu"]["logical_cores"] >= 1
    if not doc["hardware"]["gpus"]:
        assert "no GPU" in proc.stdout


def test_info_json_is_pure_json_on_stdout(cli, tmp_path: Path) -> None:
    proc = cli("info", "--json", "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info == read_run(tmp_path / "run")["hardware"]
    assert "run.json" in proc.stderr


def test_every_rank_command_records_the_hardware(cli, tmp_path: Path) -> None:
    proc = cli("comm", "--nproc", "1", "-b", "8", "-e", "8", "--iters", "3", "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    doc = read_run(tmp_path / "run")
    assert doc["hardware"]["hostname"] == doc["env"]["hostname"]
    assert doc["hardware"]["cpu"]["logical_cores"] >= 1
