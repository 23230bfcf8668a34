"""A run that never finished is read with the rows its CSVs hold beyond run.json's last save."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterbench.errors import UsageError
from clusterbench.results.folder import RunFolder
from clusterbench.results.table_csv import read_rows
from clusterbench.stages.comm.records import COMM, PAIRS, CommRow, PairRow
from clusterbench.stages.registry import load_run, run_folder
from clusterbench.stages.train.records import TRAIN_STEPS, StepRow

HOUR = 3600.0  # no save of run.json while the test appends


def comm_row(i: int) -> CommRow:
    return CommRow("all_reduce", 8 << i, 2 << i, "float32", 2, False, 1.5 + i / 3, 0.1 * i, 0.2, 0, 10, 1.0, 2.0, 0.5,
                   3.0, 0.1, reduce_op="sum" if i % 2 else None, root=None if i % 2 else 0)


def step_row(i: int) -> StepRow:
    return StepRow(i, None if i == 2 else 1 / 3, 10, 9, 8, 0.5, i > 1, None if i < 2 else 1234.5)


def killed_between_saves(path: Path, saved: int, appended: int) -> RunFolder:
    """A folder whose run.json holds `saved` rows of each table and whose CSVs hold `appended` more."""
    folder = run_folder(path).begin("comm", ["comm"])
    for i in range(saved + appended):
        if i == saved:
            folder.flush()
        folder.append("comm", comm_row(i), min_interval_s=HOUR)
        folder.append("train_steps", step_row(i), min_interval_s=HOUR)
        folder.append("pairs", PairRow(0, 1, "a", "b", 1024, 1.25 * (i + 1), 3.5, 0, i), min_interval_s=HOUR)
    return folder


def test_rows_past_the_last_save_are_read_back_whole(tmp_path: Path) -> None:
    folder = killed_between_saves(tmp_path / "r", saved=2, appended=3)
    on_disk = json.loads((tmp_path / "r" / "run.json").read_text())
    assert on_disk["status"] == "running" and len(on_disk["comm"]) == 2
    run = load_run(tmp_path / "r")
    # floats, None and bools as they were measured
    assert COMM.of(run) == COMM.of(folder.run) and len(COMM.of(run)) == 5
    assert TRAIN_STEPS.of(run) == TRAIN_STEPS.of(folder.run) and PAIRS.of(run) == PAIRS.of(folder.run)


def test_a_finished_run_is_read_as_saved(tmp_path: Path) -> None:
    folder = killed_between_saves(tmp_path / "r", saved=2, appended=3)
    COMM.of(folder.run).pop()
    folder.finish("failed", "rank 0 died")  # finished: run.json is the record, whatever the CSV says
    assert len(COMM.of(load_run(tmp_path / "r"))) == 4


@pytest.mark.parametrize("damage", ["another run's rows", "a row cut short", "other columns"])
def test_a_csv_that_is_not_this_runs_record_is_left_out(tmp_path: Path, damage: str) -> None:
    killed_between_saves(tmp_path / "r", saved=2, appended=3)
    csv_path = tmp_path / "r" / "comm.csv"
    lines = csv_path.read_text().splitlines(keepends=True)
    if damage == "another run's rows":
        lines[1] = lines[1].replace("all_reduce", "all_gather")
    elif damage == "a row cut short":
        lines[3] = lines[3][:20] + "\n"
    else:
        lines[0] = lines[0].replace("busbw_gbps", "bus_bw")
    csv_path.write_text("".join(lines))
    run = load_run(tmp_path / "r")
    assert len(COMM.of(run)) == 2 and len(TRAIN_STEPS.of(run)) == 5  # the other tables still catch up


def test_read_rows_names_the_file_and_line_that_does_not_fit(tmp_path: Path) -> None:
    killed_between_saves(tmp_path / "r", saved=0, appended=3)
    csv_path = tmp_path / "r" / "comm.csv"
    lines = csv_path.read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace(",False,", ",maybe,", 1)
    csv_path.write_text("".join(lines))
    with pytest.raises(ValueError, match=rf"{csv_path} line 3: "):
        read_rows(csv_path, CommRow)


def test_a_last_line_without_its_newline_is_a_write_never_finished_and_the_rows_before_it_count(tmp_path: Path) -> None:
    killed_between_saves(tmp_path / "r", saved=2, appended=3)
    csv_path = tmp_path / "r" / "comm.csv"
    text = csv_path.read_text()
    csv_path.write_text(text[:-15])  # the kill came in the middle of the last row's write
    assert len(COMM.of(load_run(tmp_path / "r"))) == 4


def test_the_pairs_live_in_their_csv_alone_and_run_json_counts_them(tmp_path: Path) -> None:
    folder = killed_between_saves(tmp_path / "r", saved=2, appended=3)
    folder.finish("complete")
    on_disk = json.loads((tmp_path / "r" / "run.json").read_text())
    assert "pairs" not in on_disk and on_disk["pair_rows"] == 5
    assert PAIRS.of(load_run(tmp_path / "r")) == PAIRS.of(folder.run)


@pytest.mark.parametrize("damage, message", [
    ("gone", r"pairs.csv is missing, and run.json records 5 rows there"),
    ("cut", r"pairs.csv holds 3 rows, and run.json records 5: the file was cut short"),
    ("junk", r"the run's pairs.csv cannot be read: .*pairs.csv line 2"),
])
def test_pairs_that_run_json_counts_and_the_folder_lacks_are_one_line(tmp_path: Path, damage: str,
                                                                       message: str) -> None:
    killed_between_saves(tmp_path / "r", saved=2, appended=3).finish("complete")
    csv_path = tmp_path / "r" / "pairs.csv"
    lines = csv_path.read_text().splitlines(keepends=True)
    if damage == "gone":
        csv_path.unlink()
    elif damage == "cut":
        csv_path.write_text("".join(lines[:4]))
    else:
        csv_path.write_text(lines[0] + "0,1,a,b,1024,fast,3.5,0,0\n" + "".join(lines[2:]))
    with pytest.raises(UsageError, match=message):
        load_run(tmp_path / "r")
