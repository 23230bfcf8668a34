"""report.html from a real tiny comm run and from synthetic train/peaks/verdicts sections."""

import re
import struct
from pathlib import Path

import pytest
from browser import CHROMIUM, chromium, full_page_png
from conftest import assert_one_line_error, read_run, run_cli
from fake_nvml import eight_h200
from report_fixtures import as_run, gpu_run_doc, peaks_section, train_section, write_run

from clusterbench.hw import nvml, topology
from clusterbench.report.html import expected_plots, render_report
from clusterbench.results import codec
from clusterbench.results.folder import load_run
from clusterbench.results.schema import RUN_KIND, SCHEMA_VERSION

# Anything a browser would fetch: src/href attributes and CSS url(), except inline data and
# in-page references (the SVG clip paths are url(#id)).
_FETCHES = re.compile(r"""(?:src|href)\s*=\s*["'](?!#|data:)|url\((?!["']?(?:#|data:))""", re.IGNORECASE)


@pytest.fixture(scope="session")
def comm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 2-rank gloo sweep, kept small: two ops, 1 KiB to 64 KiB, three timed iterations."""
    out = tmp_path_factory.mktemp("comm") / "run"
    proc = run_cli("comm", "--nproc", "2", "--ops", "all_reduce,all_gather", "-b", "1K", "-e", "64K",
                   "--iters", "3", "--warmup", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture
def gpu_hardware(monkeypatch: pytest.MonkeyPatch) -> dict:
    """The picture of an 8 x H200 NVSwitch machine, through the real describe() on a fake NVML."""
    monkeypatch.setattr(nvml, "load", eight_h200)
    return codec.dump(topology.describe())


def mixed_run(comm_run: Path, dest: Path) -> Path:
    """The real comm run plus this host's picture and synthetic train, peaks and verdicts."""
    doc = read_run(comm_run)
    doc.update(hardware=codec.dump(topology.describe()), train=train_section(mre=0.031, verdict="FAIL"),
               peaks=peaks_section(devices=1))
    return write_run(dest, doc)


def self_contained(html: str) -> None:
    assert not _FETCHES.search(html), _FETCHES.search(html)
    assert "<script" not in html and "@import" not in html and "@font-face" not in html


def test_report_of_a_real_comm_run(comm_run: Path) -> None:
    proc = run_cli("report", str(comm_run))
    assert proc.returncode == 0, proc.stderr
    html = (comm_run / "report.html").read_text()
    self_contained(html)
    assert expected_plots(load_run(comm_run)) == 3  # two ops and the overview
    assert html.count('<svg class="plot"') == 3
    assert "no theoretical line" in html
    assert html.count("<code>all_reduce</code>") == 1 and "all values OK" in html
    assert "Size (Bytes)" in html and "#wrong" in html and "p99" in html
    assert "Fine-tuning" not in html and 'id="peaks"' not in html  # no data, no section
    assert re.search(r'badge pass">PASS</span><span class="check">comm correctness', html)


def test_report_with_train_peaks_and_no_gpu(comm_run: Path, tmp_path: Path) -> None:
    run = mixed_run(comm_run, tmp_path / "run")
    html = render_report(run).read_text()
    self_contained(html)
    assert html.count('<svg class="plot"') == expected_plots(load_run(run)) == 4
    for text in ("no GPU", "Loss per optimizer step", "mean relative error", "sft-shipped-1b-bf16",
                 "39.8 %", "5120", "matmul bfloat16", "mean relative error 0.031 &gt;= limit 0.02"):
        assert text in html, text
    assert 'badge fail">FAIL</span> against the reference' in html


def test_report_of_a_gpu_run_draws_the_link_line(gpu_hardware: dict, tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", gpu_run_doc(gpu_hardware))
    html = render_report(run).read_text()
    self_contained(html)
    assert html.count('<svg class="plot"') == expected_plots(load_run(run)) == 4
    assert "Theoretical line: NVLink 4 × 18: 450 GB/s per GPU" in html
    assert "370 GB/s" in html
    # all_reduce peaks at about 460 GB/s: above the line, explained as NVLS, not an error.
    assert html.count("That is not an error") == 1
    assert html.count(">NV18<") == 56
    assert "Overall <span class=\"badge fail\">FAIL</span>" in html
    assert 'badge warn">WARN</span><span class="check">comm busbw' in html
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids)), "SVG ids must be unique across plots"


def test_report_command_rewrites_a_stale_report(comm_run: Path, tmp_path: Path) -> None:
    run = mixed_run(comm_run, tmp_path / "run")
    (run / "report.html").write_text("stale")
    proc = run_cli("report", str(run / "run.json"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"report: {run / 'report.html'}"
    assert "Fine-tuning" in (run / "report.html").read_text()


def _half_written(folder: Path) -> Path:
    folder.mkdir()
    (folder / "run.json").write_text('{"schema_version": 1, "tool": "clusterbench", "comm": [{"op": ')
    return folder


def _other_schema(folder: Path) -> Path:
    return write_run(folder, {"schema_version": SCHEMA_VERSION + 1, "kind": RUN_KIND})


@pytest.mark.parametrize(("make", "needle"), [
    (lambda p: p, "no run found"),
    (_half_written, "not valid JSON (half-written or corrupt)"),
    (_other_schema, f"schema version {SCHEMA_VERSION + 1}"),
])
def test_report_bad_run_folder_is_one_line(tmp_path: Path, make, needle: str) -> None:
    run = make(tmp_path / "run")
    assert_one_line_error(run_cli("report", str(run)), 2, needle)


def test_expected_plots_counts_sections() -> None:
    doc = gpu_run_doc({}, comm=[], train=train_section())
    doc["train"]["losses"] = []
    assert expected_plots(as_run(doc)) == 0
    doc = gpu_run_doc({}, comm=gpu_run_doc({})["comm"][:1], train=train_section())
    assert expected_plots(as_run(doc)) == 2


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                    "(apt-get install -y chromium chromium-driver)")
def test_reports_open_cleanly_in_chromium(comm_run: Path, gpu_hardware: dict, tmp_path: Path) -> None:
    """In a real headless Chromium: no console error, nothing fetched, every plot drawn."""
    pytest.importorskip("selenium", reason="needs the selenium package to drive chromium")
    runs = {"cpu": mixed_run(comm_run, tmp_path / "cpu"),
            "gpu": write_run(tmp_path / "gpu", gpu_run_doc(gpu_hardware))}
    with chromium() as driver:
        for name, run in runs.items():
            driver.get(render_report(run).resolve().as_uri())
            errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            assert errors == [], errors
            fetched = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
            assert fetched == [], f"the report must not load anything: {fetched}"
            drawn = driver.execute_script(
                "return [...document.querySelectorAll('svg.plot')].filter(s => {"
                " const r = s.getBoundingClientRect(); return r.width > 200 && r.height > 100; }).length")
            assert drawn == expected_plots(load_run(run)), f"{name}: plots missing or not drawn"
            shot = tmp_path / f"report-{name}.png"
            shot.write_bytes(full_page_png(driver))
            _check_png(shot)


def _check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width == 1280 and height > 1500, (width, height)
    assert len(data) > 50_000, "a blank page compresses to almost nothing"
