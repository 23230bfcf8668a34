"""History from a real store: a fleet's past written through the store's own API (as runs record
themselves), then asked through the CLI: a node over time, the fleet by date, regressions by the
YAML rules, the trends page, and a baseline of the healthy past."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from browser import CHROMIUM, chromium
from conftest import assert_one_line_error, run_cli

from clusterbench.store.db import open_store
from clusterbench.store.record import Figure, RunRecord
from clusterbench.store.where import sqlite

KLASS = "H200 x8"
NODES = [f"gpu-{i:02d}" for i in range(1, 6)]
DAY = 86400


def stamp(seconds: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(seconds))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight daily fleet runs of five nodes; gpu-03's matmul falls by 40 % in the last; gpu-05 was excluded
    once (its figures then stay out of a baseline); one run failed as a whole."""
    db = tmp_path_factory.mktemp("history") / "fleet.db"
    st = open_store(sqlite(db))
    start = time.time() - 8 * DAY
    for day in range(8):
        figures, verdicts = [], {}
        for i, node in enumerate(NODES):
            matmul = 700.0 + i + day % 2
            if node == "gpu-03" and day == 7:
                matmul = 420.0
            if node == "gpu-05" and day == 2:
                matmul = 100.0
            figures += [Figure(node, "", "node.matmul_tflops", matmul, KLASS),
                        Figure(node, "", "node.latency_us", 20.0 + i, KLASS)]
            verdicts[node] = "EXCLUDE" if node == "gpu-05" and day == 2 else "PASS"
        status = "failed" if day == 4 else "complete"
        st.record(RunRecord(f"run{day}", "fleet", stamp(start + day * DAY), None, status,
                            "FAIL" if day in (2, 4) else "PASS", "gpu-01", None, figures, verdicts))
    st.close()
    return db


def test_a_node_over_time(store: Path) -> None:
    proc = run_cli("history", "--store", str(store), "--node", "gpu-03", "--metric", "node.matmul_tflops")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith("20")]
    assert [float(r[4]) for r in rows] == [702, 703, 702, 703, 702, 703, 702, 420]


def test_the_fleet_by_date(store: Path) -> None:
    proc = run_cli("history", "--store", str(store), "--metric", "node.matmul_tflops", "--since", "9d")
    rows = [line.split() for line in proc.stdout.splitlines() if line[:2] == "20"]
    assert len(rows) == 8 and all(r[1] == "5" for r in rows)
    assert float(rows[2][2]) == 100.0 and float(rows[-1][2]) == 420.0  # the day's worst node


def test_regressions_name_the_node_that_fell_against_itself_and_its_class(store: Path, tmp_path: Path) -> None:
    proc = run_cli("history", "--store", str(store), "--regressions")
    assert proc.returncode == 1, proc.stderr
    found = [line for line in proc.stdout.splitlines() if line.startswith("  ")]
    assert len(found) == 1 and "gpu-03" in found[0] and "node.matmul_tflops" in found[0], proc.stdout
    # The thresholds are rules: a looser one lets the fall pass.
    rules = tmp_path / "loose.yaml"
    rules.write_text("rules:\n  - name: lenient\n    metric: node.*\n    function: change\n    criteria: '>= -0.5'\n"
                     "    level: WARN\n    missing: ignore\n")
    assert run_cli("history", "--store", str(store), "--regressions", "--rules", str(rules)).returncode == 0
    rules.write_text("rules:\n  - metric: node.*\n    criteria: '>= 1'\n")
    assert_one_line_error(run_cli("history", "--store", str(store), "--regressions", "--rules", str(rules)), 2,
                          "not of function change")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                    "(apt-get install -y chromium chromium-driver)")
def test_the_trends_page_opens_in_chromium(store: Path, tmp_path: Path) -> None:
    """Drawn in a real headless Chromium: no console error, nothing fetched, a plot per metric, the regression named."""
    pytest.importorskip("selenium", reason="needs the selenium package to drive chromium")
    page = tmp_path / "trends.html"
    proc = run_cli("history", "--store", str(store), "--report", str(page))
    assert proc.returncode == 0, proc.stderr
    with chromium() as driver:
        driver.get(page.resolve().as_uri())
        assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
        assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
        drawn = driver.execute_script("return [...document.querySelectorAll('svg.plot')].filter(s => {"
                                      " const r = s.getBoundingClientRect(); return r.width > 200; }).length")
        assert drawn == 2  # node.matmul_tflops and node.latency_us
        assert "gpu-03" in driver.find_element("id", "regressions").text
    assert_one_line_error(run_cli("history", "--store", str(store), "--report", str(page)), 2, "--overwrite")


def test_a_baseline_of_the_healthy_past(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "baseline.json"
    proc = run_cli("baseline", "--from-store", "--store", str(store), "--since", "30d", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["klass"] == KLASS and len(doc["runs"]) == 6  # not the run that failed, nor the FAIL verdict's
    band = {b["metric"]: b for b in doc["bands"]}["matmul_tflops"]
    assert band["nodes"] == 5 and 700 <= band["median"] <= 705 and band["spread"] < 5
    assert doc["metrics"]["node.matmul_tflops"]["min"] == 420.0  # gpu-03's last run passed: it is history too

    from clusterbench.analyse.baseline import bands_of
    from clusterbench.stages.registry import load_run

    assert {b.metric for b in bands_of(out, "--baseline", load_run)} == {"matmul_tflops"}


def test_questions_the_store_cannot_answer(store: Path, tmp_path: Path) -> None:
    assert_one_line_error(run_cli("history", "--store", str(store), "--metric", "node.nope"), 2, "no such metric")
    assert_one_line_error(run_cli("history", "--store", str(store), "--node", "gpu-01"), 2, "--node needs --metric")
    assert_one_line_error(run_cli("history", "--store", str(store), "--since", "yesterday"), 2, "not a period")
    assert_one_line_error(run_cli("baseline", "--from-store", "--store", str(store), "--class", "A100 x8", "-o",
                                  str(tmp_path / "b.json")), 2, "the store knows 'H200 x8'")
    summary = run_cli("history", "--store", str(store))
    assert "8 runs, 5 nodes" in summary.stdout and KLASS in summary.stdout
