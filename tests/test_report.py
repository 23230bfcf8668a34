"""report.html from a real tiny comm run and from synthetic train/peaks/verdicts sections."""

import re
import struct
from pathlib import Path

import pytest
from browser import CHROMIUM, chromium, full_page_png
from conftest import assert_one_line_error, read_run, run_cli
from fake_nvml import eight_h200
from report_fixtures import as_run, comm_rows, gpu_run_doc, peaks_section, scope_rows, train_section, write_run

from clusterbench.hw import nvml, topology
from clusterbench.results import codec
from clusterbench.results.run import RUN_KIND, SCHEMA_VERSION
from clusterbench.stages.comm.report import plot_count
from clusterbench.stages.registry import expected_plots, load_run, render_report

# Anything a browser would fetch: src/href attributes and CSS url(), except inline data and
# in-page references (the SVG clip paths are url(#id)).
_FETCHES = re.compile(r"""(?:src|href)\s*=\s*["'](?!#|data:)|url\((?!["']?(?:#|data:))""", re.IGNORECASE)
_PLOT = re.compile(r'<svg class="plot" data-plot="([^"]+)".*?</svg>', re.DOTALL)
LATENCY_AXIS = "time per call (µs)"


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


def comm_html(html: str) -> str:
    """The comm section alone: other sections (hardware, peaks) have units of their own."""
    start = html.index('<section id="comm"')
    return html[start:html.index("</section>", start)]


def plots(html: str) -> dict[str, str]:
    """Each inline SVG plot by its data-plot name."""
    return {m[1]: m[0] for m in _PLOT.finditer(html)}


def render_doc(folder: Path, doc: dict) -> tuple[str, int]:
    """The report of a synthetic run.json, and how many plots comm.plot_count says its comm section holds."""
    run = load_run(write_run(folder, doc))
    html = render_report(folder, run).read_text()
    assert html.count('<svg class="plot"') == expected_plots(run)
    return html, plot_count(run)


def test_report_of_a_real_comm_run(comm_run: Path) -> None:
    proc = run_cli("report", str(comm_run))
    assert proc.returncode == 0, proc.stderr
    html = (comm_run / "report.html").read_text()
    self_contained(html)
    assert html.count('<svg class="plot"') == expected_plots(load_run(comm_run))
    drawn = plots(comm_html(html))
    assert len(drawn) == plot_count(load_run(comm_run)) == 4  # busbw and latency of both ops, a panel per op
    assert set(drawn) == {"comm-all-busbw", "comm-all-latency", "comm-all_reduce", "comm-all_gather"}
    # CPU ranks time each call (stamps), so each op's latency panel shades p50..p99.
    assert all("p50–p99 of calls" in drawn[f"comm-{op}"] for op in ("all_reduce", "all_gather"))
    assert "no theoretical line" in html
    assert html.count("<code>all_reduce</code>") == 1 and "all values OK" in html
    assert "Size (Bytes)" in html and "#wrong" in html and "p99" in html
    # The run printed Gbps (the default unit): so do the plots, summaries and tables.
    comm = comm_html(html)
    assert "GB/s" not in comm and "busbw (Gbps)" in drawn["comm-all-busbw"] and "BusBW (Gbps)" in comm
    assert "Fine-tuning" not in html and 'id="peaks"' not in html  # no data, no section
    assert re.search(r'badge pass">PASS</span><span class="check">comm correctness', html)


def test_report_with_train_peaks_and_no_gpu(comm_run: Path, tmp_path: Path) -> None:
    run = mixed_run(comm_run, tmp_path / "run")
    html = render_report(run).read_text()
    self_contained(html)
    assert html.count('<svg class="plot"') == expected_plots(load_run(run))
    assert len(plots(comm_html(html))) == plot_count(load_run(run)) == 4
    for text in ("no GPU", "Loss per optimizer step", "mean relative error", "sft-shipped-1b-bf16",
                 "39.8 %", "5120", "matmul bfloat16", "mean relative error 0.031 &gt;= limit 0.02"):
        assert text in html, text
    assert 'badge fail">FAIL</span> against the reference' in html


def test_report_of_a_gpu_run_draws_the_link_line(gpu_hardware: dict, tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", gpu_run_doc(gpu_hardware))
    html = render_report(run).read_text()
    self_contained(html)
    assert html.count('<svg class="plot"') == expected_plots(load_run(run))
    assert len(plots(comm_html(html))) == plot_count(load_run(run)) == 4
    assert "Theoretical line: NVLink 4 × 18: 450 GB/s per GPU" in html
    assert "370 GB/s" in html
    # all_reduce peaks at about 460 GB/s: above the line, explained as NVLS, not an error.
    assert html.count("That is not an error") == 1
    assert html.count(">NV18<") == 56
    assert "Overall <span class=\"badge fail\">FAIL</span>" in html
    assert 'badge warn">WARN</span><span class="check">comm busbw' in html
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids)), "SVG ids must be unique across plots"


@pytest.mark.parametrize(("unit", "label", "line", "peak", "other"), [
    ("GBps", "GB/s", "450 GB/s per GPU", "474 GB/s", "Gbps"),
    ("Gbps", "Gbps", "3,600 Gbps per GPU", "3,794 Gbps", "GB/s"),
])
def test_the_comm_section_speaks_the_unit_the_run_printed(
    gpu_hardware: dict, tmp_path: Path, unit: str, label: str, line: str, peak: str, other: str,
) -> None:
    doc = gpu_run_doc(gpu_hardware, comm_options={"unit": unit, "check": True})
    html, _ = render_doc(tmp_path / "run", doc)
    comm, drawn = comm_html(html), plots(comm_html(html))
    assert other not in comm, "one unit per page"
    assert f"Every bandwidth here is in {label}" in comm and f"Theoretical line: NVLink 4 × 18: {line}" in comm
    assert comm.count(f"BusBW ({label})") == comm.count(f"Throughput ({label})") == 2
    busbw_plots = [svg for svg in drawn.values() if f"busbw ({label})" in svg]
    assert len(busbw_plots) == 3  # the overview and each op's small multiple
    assert all(f"theoretical line {line.split(' per')[0]}" in svg for svg in busbw_plots)
    # The figures themselves are converted, the line with them: the share of the line is the same.
    assert f"peak {peak} = 105.4 % of the line" in comm
    assert f"NVLink 4: about {'370 GB/s' if unit == 'GBps' else '2,960 Gbps'} is the usual" in comm


def test_each_op_is_a_small_multiple_with_its_latency(gpu_hardware: dict, tmp_path: Path) -> None:
    ops = {"all_reduce": 478.0, "all_gather": 365.0, "reduce_scatter": 360.0, "broadcast": 350.0,
           "reduce": 340.0, "alltoall": 300.0, "pt2pt": 150.0}
    html, expected = render_doc(tmp_path / "run", gpu_run_doc(gpu_hardware, comm=comm_rows(ops)))
    comm, drawn = comm_html(html), plots(comm_html(html))
    assert expected == len(drawn) == 2 + len(ops)  # the overview's pair, one panel per op
    assert comm.count('<figure class="panel">') == len(ops) and comm.count('<div class="multiples">') == 1
    for op in ops:
        panel = drawn[f"comm-{op}"]
        assert "busbw (GB/s)" in panel and LATENCY_AXIS in panel, op
        assert f"<summary>{op}: table of 11 sizes</summary>" in comm
    assert LATENCY_AXIS in drawn["comm-all-latency"] and "busbw (GB/s)" in drawn["comm-all-busbw"]
    # GPU runs time batches (loop): their p50/p99 spread batch means, not calls, so no band.
    assert "p50–p99" not in comm


def test_one_op_gets_busbw_beside_latency_and_no_multiples(gpu_hardware: dict, tmp_path: Path) -> None:
    rows = [r | {"timing": "stamps"} for r in comm_rows({"all_reduce": 478.0})]
    html, expected = render_doc(tmp_path / "run", gpu_run_doc(gpu_hardware, comm=rows, train=None))
    drawn = plots(comm_html(html))
    assert expected == len(drawn) == 2 and '<figure class="panel">' not in html
    assert "busbw (GB/s)" in drawn["comm-all_reduce-busbw"]
    assert LATENCY_AXIS in drawn["comm-all_reduce-latency"] and "p50–p99 of calls" in drawn["comm-all_reduce-latency"]
    assert "<summary>all_reduce: table of 11 sizes</summary>" in html


def test_scopes_are_small_multiples_in_the_runs_unit(gpu_hardware: dict, tmp_path: Path) -> None:
    rows = (comm_rows({"all_reduce": 478.0}) + scope_rows("intra", {"node-a": 400.0, "node-b": 300.0})
            + scope_rows("intra", {"node-a": 350.0, "node-b": 350.0}, op="all_gather"))
    doc = gpu_run_doc(gpu_hardware, comm=rows, train=None, comm_options={"unit": "Gbps", "check": True})
    html, expected = render_doc(tmp_path / "run", doc)
    comm, drawn = comm_html(html), plots(comm_html(html))
    assert expected == len(drawn) == 2 + 2  # the one global op's pair, a panel per intra op
    assert {"comm-intra-all_reduce", "comm-intra-all_gather"} <= set(drawn)
    assert "busbw (Gbps)" in drawn["comm-intra-all_reduce"] and "GB/s" not in comm
    assert comm.count('<figure class="panel">') == 2 and "Each node&#x27;s ranks among themselves" in comm
    # node-b at 300 GB/s (2,400 Gbps at the top size, scaled by the sweep's curve) is the slower node.
    assert re.search(r"slowest of 2: node-b, 2,3\d\d Gbps = 8\d\.\d % of the median", comm)
    assert "all_reduce, intra: table of 2 teams at their largest size, slowest first" in comm


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
    assert expected_plots(as_run(doc)) == 3  # one op: busbw and latency; the loss curve
    doc = gpu_run_doc({}, comm=scope_rows("inter", {"rail 0": 40.0, "rail 1": 45.0}), train=None)
    assert expected_plots(as_run(doc)) == 1


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
        _check_narrow(driver, runs)


def _check_narrow(driver: object, runs: dict[str, Path]) -> None:
    """On a phone's width the page does not scroll sideways and the small multiples stack, still drawn."""
    driver.set_window_size(390, 900)
    for name, run in runs.items():
        driver.get((run / "report.html").resolve().as_uri())
        width, scroll = driver.execute_script(
            "return [document.documentElement.clientWidth, document.documentElement.scrollWidth]")
        assert scroll <= width, f"{name}: {scroll} px wide on a {width} px screen"
        drawn = driver.execute_script("return [...document.querySelectorAll('svg.plot')]"
                                      ".filter(s => s.getBoundingClientRect().width > 200).length")
        assert drawn == expected_plots(load_run(run)), f"{name}: plots too narrow to read"


def _check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width == 1280 and height > 1500, (width, height)
    assert len(data) > 50_000, "a blank page compresses to almost nothing"
