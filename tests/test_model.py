"""The alpha-beta model: the fit, the per-algorithm formulas, the CLI, and its error on sizes it has not seen."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from conftest import assert_one_line_error, read_run, run_cli
from report_fixtures import as_run, doc_of, write_run

from clusterbench.results import codec
from clusterbench.results.run import Env, Run
from clusterbench.stages.comm import predict as pr
from clusterbench.stages.comm.cost_model import fit_line, fit_run
from clusterbench.stages.comm.records import COST_MODEL, CommRow
from clusterbench.stages.registry import expected_plots, page

SIZES = [1 << k for k in range(10, 23)]  # 1 KiB .. 4 MiB
HOLDOUT_LIMIT = 0.15  # the bar: held-out sizes predicted within 15 % (median)


def synthetic_rows(op: str, n: int, nodes: int, alpha: float, beta: float, noise: float = 0.03,
                   seed: int = 1, knee: int | None = None) -> list[dict]:
    """Rows timed by t = alpha + beta S with multiplicative noise, in the shape comm writes; past `knee`
    bytes each further byte costs 4 beta, as past a CPU's cache."""
    rng = random.Random(seed)
    rows = []
    for size in SIZES:
        t = (alpha + beta * size + 3 * beta * max(0, size - (knee or size))) * (1 + rng.uniform(-noise, noise))
        rows.append(codec.dump(CommRow(
            op, size, size // 4, "float32", n, False, duration_us=t, throughput_gbps=size * 8e-3 / t,
            busbw_gbps=0.0, wrong=0, iters=20, p50_us=t, p99_us=t, min_us=t, max_us=t, cv=0.0, nodes=nodes)))
    return rows


def synthetic_run(tmp_path: Path, rows: list[dict], nodes: int = 1, ranks: int = 2) -> Path:
    placements = [{"rank": r, "node": f"node{r * nodes // ranks}", "local_rank": r % (ranks // nodes),
                   "device": "cpu"} for r in range(ranks)]
    doc = doc_of(Run(command="comm", status="complete", env=Env("node0", world_size=ranks)))
    doc["env"]["ranks"], doc["comm"] = placements, rows
    return write_run(tmp_path / "run", doc)


def test_fit_recovers_alpha_and_beta_through_outliers() -> None:
    rng = random.Random(7)
    alpha, beta = 25.0, 1 / 12e3  # 25 µs, 12 GB/s
    sizes = [1 << k for k in range(3, 31)]
    times = [(alpha + beta * s) * (1 + rng.gauss(0, 0.02)) for s in sizes]
    for i in (2, 9, 20):  # scheduler stalls: several times too slow
        times[i] *= 4
    line = fit_line(sizes, times)
    assert line.alpha == pytest.approx(alpha, rel=0.05)
    assert line.beta == pytest.approx(beta, rel=0.03)
    assert line.r2 > 0.95


def test_fit_derives_the_link_through_the_ring(tmp_path: Path) -> None:
    # ring all_reduce on 4 ranks over a 10 µs, 20 GB/s link: 6 steps, 1.5 S bytes
    a, b = 10.0, 1e-3 / 20
    run = as_run(json.loads((synthetic_run(tmp_path, synthetic_rows("all_reduce", 4, 1, 6 * a, 1.5 * b, 0.0),
                                            ranks=4) / "run.json").read_text()))
    model = fit_run(run)
    (fit,) = model.fits
    assert fit.bandwidth_gb_s == pytest.approx(20.0, rel=1e-6)  # busbw factor / beta: the link's rate
    (link,) = model.links
    assert (link.link, link.alpha_us, link.bandwidth_gb_s) == ("intra", pytest.approx(a), pytest.approx(20.0))


def test_formulas_for_known_n() -> None:
    link = pr.Link("test", alpha_us=5.0, bandwidth_gb_s=10.0)  # beta = 1e-4 µs/B
    s = 1e6
    one = pr.Cluster(1, 4, link, None)
    ring, tree, hier = (pr.ALGORITHMS["all_reduce"][k](one, s) for k in ("ring", "tree", "hierarchical"))
    assert ring == pytest.approx(2 * 3 * 5 + 2 * 3 / 4 * s * 1e-4)
    assert tree == pytest.approx(2 * 2 * 5 + 2 * s * 1e-4)
    assert hier == pytest.approx(ring)  # one node: reduce-scatter + all-gather is the ring
    slow = pr.Link("net", alpha_us=8.0, bandwidth_gb_s=2.0)
    two = pr.Cluster(2, 4, link, slow)
    assert pr.ALGORITHMS["all_reduce"]["ring"](two, s) == pytest.approx(2 * 7 * 8 + 2 * 7 / 8 * s * 5e-4)
    assert pr.ALGORITHMS["all_reduce"]["hierarchical"](two, s) == pytest.approx(
        2 * (3 * 5 + 3 / 4 * s * 1e-4) + 2 * 1 * 8 + 2 * 1 / 2 * (s / 4) * 5e-4)
    assert pr.ALGORITHMS["all_gather"]["ring"](two, s) == pytest.approx(7 * 8 + 7 / 8 * s * 5e-4)
    (point,) = pr.predict(one, "all_gather", [int(s)])[0].points
    assert point.busbw_gb_s == pytest.approx(s / point.time_us * 1e-3 * 3 / 4)


def test_winner_moves_from_tree_to_ring_on_a_large_cluster() -> None:
    cluster = pr.Cluster(128, 1, pr.named_link("nvlink4"), pr.named_link("ndr"))
    rows = pr.predict(cluster, "all_reduce", pr.powers_of_two(1024, 16 * 1024**3))
    assert rows[0].winner.algorithm == "tree"
    assert rows[-1].winner.algorithm == "ring"
    # several GPUs per node: the big sizes go to the hierarchical algorithm, which keeps S/G on the network
    eight = pr.Cluster(16, 8, pr.named_link("nvlink4"), pr.named_link("ndr"))
    assert pr.predict(eight, "all_reduce", [1024**3])[0].winner.algorithm == "hierarchical"


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Two ranks on this 2-core VM: a third rank oversubscribes it, and its p50 then jumps between the
    # link's time and a 4 ms scheduler slice (docs/methodology.md §14) -- that measures Linux, not the link.
    # Up to 1 MiB: past it gloo's cost per byte on a CPU grows with the caches it leaves, and one line over
    # both regimes is what test_a_bent_sweep_is_named covers. Steps of 2^(1/4): twenty sizes are predicted, so
    # that a size or two caught by a scheduler stall cannot move the median (§14 has the figures). 0.25 s a size,
    # not the sweep's 0.05: a p50 over 25 calls is a stall's whenever the other tests' ranks hold both cores
    # for those 50 ms (one CI run: 1.4 ms at 1 KiB, 0.14 ms at 16 KiB).
    out = tmp_path_factory.mktemp("model") / "run"
    proc = run_cli("comm", "--nproc", "2", "--ops", "all_reduce,all_gather", "-b", "1K", "-e", "1M",
                   "-f", "1.19", "--time-budget", "0.25", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def test_holdout_error_on_a_recorded_gloo_sweep() -> None:
    # A real sweep recorded with 200 calls per size (tests/data/gloo-sweep/PROVENANCE.md): the bar is the
    # model's. A live sweep on a shared 2-core VM puts 12-77 % of scheduler noise on it (§14), which the
    # next test holds to being said rather than to being small.
    from clusterbench.stages.registry import load_run

    model = fit_run(load_run(Path(__file__).parent / "data" / "gloo-sweep"))
    assert {(v.op, v.link) for v in model.validation} == {("all_reduce", "intra"), ("all_gather", "intra")}
    for v in model.validation:
        assert v.median_error < HOLDOUT_LIMIT, v


def test_a_live_sweep_is_fitted_within_the_bar_or_said_not_to_be(gloo_run: Path) -> None:
    from clusterbench.stages.registry import load_run

    model = fit_run(load_run(gloo_run))
    proc = run_cli("model", "fit", str(gloo_run))
    assert proc.returncode == 0, proc.stderr
    assert {(v.op, v.link) for v in model.validation} == {("all_reduce", "intra"), ("all_gather", "intra")}
    for v in model.validation:
        named = f"{v.op} ({v.link}): held-out error" in proc.stdout
        assert named == (v.median_error > HOLDOUT_LIMIT), (v, proc.stdout)


def test_a_bent_sweep_is_named(tmp_path: Path) -> None:
    run_dir = synthetic_run(tmp_path, synthetic_rows("all_reduce", 2, 1, 100.0, 1e-3 / 2, knee=256 * 1024))
    proc = run_cli("model", "fit", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    assert "# not one line: all_reduce (intra): held-out error" in proc.stdout
    proc = run_cli("model", "fit", str(run_dir), "--sizes", "1K..256K", "--save")
    assert proc.returncode == 0, proc.stderr
    assert "sizes 1 KiB to 256 KiB" in proc.stdout and "not one line" not in proc.stdout
    model = read_run(run_dir)["cost_model"]
    assert model["size_range"] == [1024, 256 * 1024] and model["fits"][0]["points"] == 9
    assert model["fits"][0]["bandwidth_gb_s"] == pytest.approx(2.0, rel=0.05)  # the cache regime's rate
    html = page(as_run(read_run(run_dir)))
    assert "(sizes 1 KiB to 256 KiB)" in html and "Not one line" not in html


def test_holdout_error_across_two_nodes(tmp_path: Path) -> None:
    # The network-namespace bed is too slow for this: an inter-node sweep as a 2-node gloo run times it.
    rows = synthetic_rows("all_reduce", 4, 2, 180.0, 1e-3 / 0.9, noise=0.08)
    model = fit_run(as_run(json.loads((synthetic_run(tmp_path, rows, 2, 4) / "run.json").read_text())))
    (v,) = model.validation
    assert v.link == "inter" and v.median_error < HOLDOUT_LIMIT


def test_fit_and_predict_cli(gloo_run: Path, tmp_path: Path) -> None:
    proc = run_cli("model", "fit", str(gloo_run), "--save")
    assert proc.returncode == 0, proc.stderr
    assert "all_reduce" in proc.stdout and "intra-node link" in proc.stdout
    assert read_run(gloo_run)["cost_model"]["fits"]
    plot = tmp_path / "curves.svg"
    proc = run_cli("model", "predict", "--from", str(gloo_run), "--nodes", "4", "--inter", "ndr",
                   "--sizes", "1K..1G", "--plot", str(plot))
    assert proc.returncode == 0, proc.stderr
    assert "# all_reduce of 1 GiB on 4 nodes x 2 ranks:" in proc.stdout
    assert plot.read_text().startswith("<svg")


def test_planning_question_on_a_two_node_run(tmp_path: Path) -> None:
    rows = (synthetic_rows("all_reduce", 2, 1, 40.0, 1e-3 / 8) + synthetic_rows("all_reduce", 4, 2, 180.0, 1e-3))
    for row in rows[: len(SIZES)]:
        row["scope"], row["team"] = "intra", "node0"
    run_dir = synthetic_run(tmp_path, rows, 2, 4)
    proc = run_cli("model", "predict", "--from", str(run_dir), "--nodes", "16")
    assert proc.returncode == 0, proc.stderr
    assert "# all_reduce of 1 GiB on 16 nodes x 2 ranks:" in proc.stdout


def test_report_section(gloo_run: Path) -> None:
    from clusterbench.stages.registry import load_run

    run = load_run(gloo_run)
    COST_MODEL.set(run, fit_run(run))
    html = page(run)
    assert '<section id="model"' in html and "Target: 16 nodes like this one" in html
    assert html.count('<svg class="plot"') == expected_plots(run)


@pytest.mark.parametrize(("args", "needle"), [
    (("fit", "/nonexistent/run"), "no run found"),
    (("predict", "--intra", "nvlink9", "--nodes", "1", "--gpus-per-node", "8"), "unknown link class"),
    (("predict", "--intra", "nvlink4", "--nodes", "0", "--gpus-per-node", "8"), "--nodes: must be at least 1"),
    (("predict", "--intra", "nvlink4", "--nodes", "2", "--gpus-per-node", "8"), "inter-node link class"),
    (("predict", "--nodes", "2"), "no intra-node link class"),
])
def test_bad_input_is_one_line(args: tuple[str, ...], needle: str) -> None:
    assert_one_line_error(run_cli("model", *args), 2, needle)


def test_run_without_comm_rows_is_one_line(tmp_path: Path) -> None:
    run_dir = synthetic_run(tmp_path, [])
    assert_one_line_error(run_cli("model", "fit", str(run_dir)), 2, "no comm rows")


@pytest.mark.parametrize(("sizes", "needle"), [
    ("8M..16M", "no comm rows with two or more sizes from 8 MiB to 16 MiB"),
    ("4M..1K", "the high end is below the low one"),
    ("1K..lots", "cannot read 'lots' as a size"),
])
def test_bad_fit_range_is_one_line(tmp_path: Path, sizes: str, needle: str) -> None:
    run_dir = synthetic_run(tmp_path, synthetic_rows("all_reduce", 2, 1, 40.0, 1e-3 / 8))
    assert_one_line_error(run_cli("model", "fit", str(run_dir), "--sizes", sizes), 2, needle)


def test_sweep_sizes() -> None:
    assert pr.powers_of_two(1024, 4096) == [1024, 2048, 4096]
    assert math.log2(pr.powers_of_two(1000, 1 << 34)[-1]) == 34
