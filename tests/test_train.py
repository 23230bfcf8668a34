"""`clusterbench train` / `align` as users run them: real gloo ranks, tiny preset, real files.

Short runs use a small task (SHORT) so the file stays fast on two cores; only the default
run, judged against the shipped reference, takes the full 100 steps.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import GPT2, assert_one_line_error, read_run, run_cli, run_side_by_side

from clusterbench.analyse.metrics import Metrics
from clusterbench.analyse.rules import evaluate
from clusterbench.errors import UsageError
from clusterbench.stages.registry import default_rules, load_run
from clusterbench.stages.train import flops, models
from clusterbench.stages.train.data import share
from clusterbench.stages.train.loop import accumulation, split
from clusterbench.stages.train.metrics import metrics
from clusterbench.stages.train.records import RankPhases

SHORT = ["--steps", "24", "--seq-len", "32", "--global-batch", "8", "--warmup-steps", "2",
         "--peak-tflops", "1"]


def train(out: Path, *args: str, env: dict | None = None):
    return run_cli("train", *args, "--out", str(out), env=env)


@pytest.fixture(scope="module")
def short_ref(tmp_path_factory) -> tuple[Path, Path]:
    """A reference from two repeats of the short task on 2 ranks, and its run folder."""
    base = tmp_path_factory.mktemp("ref")
    ref = base / "ref.json"
    proc = train(base / "run", *SHORT, "--repeats", "2", "--save-reference", str(ref))
    assert proc.returncode == 0, proc.stderr
    return ref, base / "run"


def test_default_run_learns_and_passes_shipped_reference(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = train(out, "--peak-tflops", "1")
    assert proc.returncode == 0, proc.stderr
    assert "verdict: PASS" in proc.stdout and "tgs" in proc.stdout
    t = read_run(out)["train"]
    c, s, losses = t["config"], t["summary"], t["losses"]
    assert len(losses) == 100 and s["steps_done"] == 100 and s["status"] == "complete"
    assert sum(losses[-10:]) / 10 < 0.6 * losses[0]  # loss falls clearly
    assert c["preset"] == "tiny" and 2e6 < c["model_params"] < 5e6 and c["world_size"] == 2
    assert c["global_batch"] == c["micro_batch"] * c["grad_accum"] * c["world_size"]
    a = t["alignment"]
    assert a["verdict"] == "PASS" and a["mre_window"] == [21, 100] and a["reference"] == "tiny-cpu-float32"
    with open(out / "train_steps.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == list(range(1, 101))
    assert [float(r["loss"]) for r in rows] == pytest.approx(losses, rel=1e-12)


def test_speed_figures_match_a_hand_computation(short_ref) -> None:
    """REFERENCE.md §4 for the tiny config, from the counted tokens of the run folder."""
    _, run = short_ref
    t = read_run(run)["train"]
    c, s = t["config"], t["summary"]
    rows = [r for r in read_run(run)["train_steps"] if r["in_window"]]
    real = sum(r["real_tokens"] for r in rows)
    assert real == s["tokens"] and all(r["tokens"] == 8 * 32 for r in rows)
    assert s["tgs"] == pytest.approx(real / (2 * s["window_s"]), rel=1e-9)
    # tiny: h=128, f=512, L=4, q=4*32=128, kv=2*32=64, V=4096; packed rows: T = 8*32, S2 = 8*32².
    h, f, L, q, kv, V, T, S2 = 128, 512, 4, 128, 64, 4096, 8 * 32, 8 * 32**2
    by_hand = T * (6 * h * f * 3 * L + 6 * (h * (q + 2 * kv) + q * h) * L + 6 * h * V) + S2 * 6 * q * L
    assert s["flops_per_step"] == by_hand
    assert flops.step_flops(flops.dims_of(c["model_config"]), T, S2) == by_hand
    tflops = by_hand * len(rows) / (2 * s["window_s"]) / 1e12
    assert s["tflops_per_device"] == pytest.approx(tflops, rel=1e-9)
    assert s["mfu"] == pytest.approx(tflops / 1.0) and s["peak_source"] == "given: --peak-tflops 1"
    assert s["padded_tgs"] is None and s["hfu"] is None  # packed rows, no recomputation


def test_a_healthy_run_splits_each_rank_step_and_names_no_straggler(short_ref) -> None:
    """Every rank's phases add up to its step, and the slow-rank rule passes (test_stragglers.py: a slow one)."""
    _, run = short_ref
    doc = read_run(run)
    ranks = [RankPhases(**r) for r in doc["train"]["phases"]]
    window = [r["seconds"] for r in doc["train_steps"] if r["in_window"]]
    assert [p.rank for p in ranks] == [0, 1] and all(p.device == "cpu" and p.compute_s > 0 for p in ranks)
    for p in ranks:
        assert p.step_s == pytest.approx(sum(window) / len(window), rel=0.05)
    m = Metrics()
    metrics(load_run(run), m)
    (verdict,) = [r for r in evaluate(default_rules(), m) if r.rule == "slow rank"]
    assert verdict.verdict == "PASS", verdict.detail


def test_padded_rows_count_only_real_tokens(tmp_path: Path) -> None:
    """--no-packing: tgs counts real tokens, the padded rate is reported beside it (REFERENCE.md §4)."""
    out = tmp_path / "run"
    proc = train(out, "--no-packing", "--steps", "6", "--seq-len", "64", "--global-batch", "8",
                 "--warmup-steps", "2", "--peak-tflops", "1")
    assert proc.returncode == 0, proc.stderr
    doc = read_run(out)
    s, c = doc["train"]["summary"], doc["train"]["config"]
    rows = [r for r in doc["train_steps"] if r["in_window"]]
    real = sum(r["real_tokens"] for r in rows)
    assert c["packing"] is False and all(r["tokens"] == 8 * 64 for r in rows)
    assert 0 < real < 8 * 64 * len(rows) and s["tokens"] == real
    assert s["tgs"] == pytest.approx(real / (2 * s["window_s"]), rel=1e-9)
    assert s["padded_tgs"] == pytest.approx(8 * 64 * len(rows) / (2 * s["window_s"]), rel=1e-9)
    dims = flops.dims_of(c["model_config"])
    by_hand = [flops.step_flops(dims, r["real_tokens"], 8 * 64**2) for r in rows]
    assert s["flops_per_step"] == pytest.approx(sum(by_hand) / len(by_hand), rel=1e-12)


def test_reference_round_trip_and_repeatability(short_ref, tmp_path: Path) -> None:
    ref, first = short_ref
    doc = json.loads(ref.read_text())
    assert doc["kind"] == "clusterbench-loss-reference" and doc["repeats"] == 2
    assert doc["noise_band"] == 0.001 and doc["max_relative_deviation"] == 0.0  # bitwise repeats
    assert doc["losses"] == read_run(first)["train"]["losses"]
    assert doc["model"] == {"preset": "tiny", "config_hash": models.resolve("tiny", None, None).config_hash}
    proc = train(tmp_path / "again", *SHORT, "--reference", str(ref))
    assert proc.returncode == 0, proc.stderr
    t = read_run(tmp_path / "again")["train"]
    assert t["losses"] == doc["losses"]  # bitwise, run after run
    assert t["alignment"]["verdict"] == "PASS" and t["alignment"]["variance"] == 0.0


def test_one_rank_aligns_with_two(short_ref, tmp_path: Path) -> None:
    ref, _ = short_ref
    proc = train(tmp_path / "one", *SHORT, "--nproc", "1", "--reference", str(ref))
    assert proc.returncode == 0, proc.stderr
    a = read_run(tmp_path / "one")["train"]["alignment"]
    assert a["verdict"] == "PASS" and a["mre"] < 1e-3
    assert read_run(tmp_path / "one")["train"]["config"]["grad_accum"] == 2


def test_three_ranks_split_unevenly_train_the_one_rank_curve(tmp_path: Path) -> None:
    """16 rows over 3 ranks are 6+5+5, cut into micro-batches of 3+3 or 3+2 rows. Three steps: the third is
    the first whose update weighs gradient magnitudes (Adam's first follows their signs). Weighting each
    rank's rows by its own loss tokens moves steps 2 and 3 by 6e-5 and 8e-5; float32 reordering by 1e-7."""
    procs = {n: train(tmp_path / n, "--nproc", n, "--steps", "3", "--warmup-steps", "1", "--peak-tflops", "1")
             for n in ("1", "3")}
    for proc in procs.values():
        assert proc.returncode == 0, proc.stderr
    assert "global batch 16 over 3 ranks (6 rows on 1, 5 on 2), each in 2 micro-batches of at most 3 rows" \
        in procs["3"].stdout
    one, three = (read_run(tmp_path / n)["train"] for n in ("1", "3"))
    assert (three["config"]["micro_batch"], three["config"]["grad_accum"]) == (3, 2)
    assert three["losses"] == pytest.approx(one["losses"], rel=1e-5)


def test_every_rank_runs_as_many_micro_batches_none_empty() -> None:
    """FSDP gathers parameters in each forward: a rank that ran fewer would hang the others."""
    for global_batch in range(1, 41):
        for world in range(1, 18):
            for most in range(1, 6):
                try:
                    micro, accum = split(global_batch, world, most)
                except UsageError:
                    assert global_batch < world or (most == 1 and global_batch % world)
                    continue
                assert accumulation(global_batch, world, micro) == accum  # what the loop derives again
                shares = [share(global_batch, world, r) for r in range(world)]
                sizes = [c.stop - c.start for s in shares
                         for c in (share(s.stop - s.start, accum, i) for i in range(accum))]
                assert sum(sizes) == global_batch and max(sizes) == micro <= most
                assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


def test_fsdp_with_checkpointing_aligns(short_ref, tmp_path: Path) -> None:
    """Built on meta and filled shard by shard, FSDP starts from DDP's weights: the first loss is bitwise the same."""
    ref, ddp_run = short_ref
    proc = train(tmp_path / "fsdp", *SHORT, "--parallel", "fsdp", "--activation-checkpointing",
                 "--reference", str(ref))
    assert proc.returncode == 0, proc.stderr
    t = read_run(tmp_path / "fsdp")["train"]
    assert t["config"]["parallel"] == "fsdp" and t["alignment"]["mre"] < 1e-3
    ddp = read_run(ddp_run)["train"]
    assert t["losses"][0] == ddp["losses"][0]
    s = t["summary"]
    assert s["weights"] == "fresh weights replayed per shard" and "weights                      fresh" in proc.stdout
    params = t["config"]["model_params"]
    assert s["model_state_bytes"] == -(-16 * params // 2) and ddp["summary"]["model_state_bytes"] == 20 * params
    assert "sharded over 2 ranks" in proc.stdout
    assert s["hfu"] == pytest.approx(s["mfu"] * flops.recompute_flops(flops.dims_of(t["config"]["model_config"]),
                                                                        256, 8 * 32**2)
                                     / s["flops_per_step"], rel=1e-9)


def test_perturbed_runs_fail_alignment(short_ref, tmp_path: Path) -> None:
    ref, _ = short_ref
    proc = train(tmp_path / "lr", *SHORT, "--lr", "1e-2", "--reference", str(ref))
    err = assert_one_line_error(proc, 1, "alignment FAIL")
    assert "verdict: FAIL" in proc.stdout, err
    doc = read_run(tmp_path / "lr")
    assert doc["status"] == "failed" and doc["train"]["alignment"]["verdict"] == "FAIL"
    # The same run judged afterwards by `align`, and a run of another seed.
    assert_one_line_error(run_cli("align", str(tmp_path / "lr"), "--reference", str(ref)), 1, "alignment FAIL")
    proc = train(tmp_path / "seed", *SHORT, "--seed", "1", "--reference", str(ref))
    assert_one_line_error(proc, 1, "variance")


def test_align_command_passes_identical_run(short_ref) -> None:
    ref, run = short_ref
    proc = run_cli("align", str(run / "run.json"), "--reference", str(ref))
    assert proc.returncode == 0, proc.stderr
    assert "verdict: PASS" in proc.stdout and "MRE steps 21..24" in proc.stdout


def test_nan_stops_with_fail_and_keeps_steps(tmp_path: Path) -> None:
    proc = train(tmp_path / "nan", *SHORT, env={"CLUSTERBENCH_TEST_NAN_STEP": "4"})
    assert_one_line_error(proc, 1, "nan at step 4")
    doc = read_run(tmp_path / "nan")
    assert doc["status"] == "failed" and doc["train"]["summary"]["status"] == "nan"
    assert len(doc["train"]["losses"]) == 4 and len(doc["train_steps"]) == 4


def _bad_files(tmp_path: Path) -> dict[str, Path]:
    bad_config = tmp_path / "bad_config.json"
    bad_config.write_text("{not json")
    bad_data = tmp_path / "bad.jsonl"
    bad_data.write_text('{"instruction": "a", "output": "b"}\n{"instruction": 3, "output": "b"}\n')
    gpt2 = tmp_path / "gpt2.json"
    gpt2.write_text(json.dumps(GPT2))
    files = {"bad_config": bad_config, "bad_data": bad_data, "gpt2": gpt2}
    llama = {"model_type": "llama", "vocab_size": 4096, "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
    for name, change in (("heads", {"hidden_size": 66}), ("negative", {"hidden_size": -64}),
                         ("unknown", {"model_type": "warp-drive"})):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps({**llama, **change}))
    return files


BAD_INPUT = [
    (["--preset", "huge"], "unknown preset 'huge'"),
    (["--model-config", "{missing}"], "no such file"),
    (["--model-config", "{bad_config}"], "not valid JSON"),
    (["--data", "{missing}"], "--data"),
    (["--data", "{bad_data}"], "bad.jsonl:2"),
    (["--seq-len", "2048"], "max_position_embeddings 1024"),
    (["--model-config", "{gpt2}", "--seq-len", "64"], "max_position_embeddings 32"),
    (["--save-reference", "/proc/clusterbench/ref.json"], "--save-reference"),
    (["--save-reference", "{run_json}"], "one of the files of this run's folder"),
    (["--global-batch", "1"], "--global-batch 1 is smaller than the 2 ranks"),
    (["--global-batch", "7", "--micro-batch", "1"], "leaves some rank 3 rows"),
    (["--reference", "{missing}"], "--reference"),
    (["--reference", "tiny-cpu-float32", "--steps", "24"], "step count 100, this run has 24"),
    # Configs transformers refuses, and one that would only fail inside the ranks: one short line each.
    (["--model-config", "{heads}"], "not a multiple of the number of attention heads"),
    (["--model-config", "{negative}"], "field hidden_size must be at least 1, got -64"),
    (["--model-config", "{unknown}"], "unknown model_type 'warp-drive'"),
]


def test_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    """Side by side: each case pays torch's and transformers' import beside the others."""
    files = {**_bad_files(tmp_path), "missing": tmp_path / "nope.json"}
    cases = {}
    for i, (args, _) in enumerate(BAD_INPUT):
        out = tmp_path / f"run{i}"
        given = [a.format(**files, run_json=out / "run.json") for a in args]
        cases[str(i)] = ["train", *given, "--peak-tflops", "1", "--out", str(out)]
    done = run_side_by_side(cases, timeout=180)
    for i, (args, needle) in enumerate(BAD_INPUT):
        assert done[str(i)] is not None, args
        assert_one_line_error(done[str(i)], 2, needle)


def test_any_causal_lm_config_trains_and_reports_tgs(tmp_path: Path) -> None:
    """REFERENCE.md §4's FLOPs formula is for Llama-style models: elsewhere tgs stands alone."""
    config = tmp_path / "gpt2.json"
    config.write_text(json.dumps(GPT2))
    out = tmp_path / "run"
    proc = train(out, "--model-config", str(config), "--steps", "4", "--warmup-steps", "1", "--seq-len", "32",
                 "--global-batch", "4", "--peak-tflops", "1")
    assert proc.returncode == 0, proc.stderr
    s = read_run(out)["train"]["summary"]
    assert s["tgs"] > 0 and s["flops_per_step"] is None and s["mfu"] is None


def test_align_refuses_mismatch_and_non_train_runs(short_ref, tmp_path: Path) -> None:
    _, run = short_ref
    assert_one_line_error(run_cli("align", str(run), "--reference", "tiny-cpu-float32"), 2,
                          "global batch 16, this run has 8")
    assert_one_line_error(run_cli("align", str(tmp_path / "none"), "--reference", "tiny-cpu-float32"), 2,
                          "no run found")


def test_levers_leave_the_task_as_it_is(short_ref, tmp_path: Path) -> None:
    """Selective checkpointing, layers kept gathered and fused AdamW change how the step runs, not what
    it computes: the run starts from the reference's loss and stays on its curve."""
    ref, ddp_run = short_ref
    proc = train(tmp_path / "levers", *SHORT, "--parallel", "fsdp", "--activation-checkpointing", "selective",
                 "--no-reshard-after-forward", "--fused-adamw", "--reference", str(ref))
    assert proc.returncode == 0, proc.stderr
    assert "selective activation checkpointing, fused AdamW, layers kept gathered from forward to backward" in proc.stdout
    t = read_run(tmp_path / "levers")["train"]
    c = t["config"]
    assert c["selective_checkpointing"] and c["activation_checkpointing"] and c["fused_adamw"]
    assert not c["reshard_after_forward"] and not c["compiled"]
    assert t["losses"][0] == read_run(ddp_run)["train"]["losses"][0] and t["alignment"]["mre"] < 1e-3
    assert t["summary"]["hfu"] is None  # selective recomputes no matmul: no FLOPs beyond the model's


def test_resharding_is_fsdp_s_lever(tmp_path: Path) -> None:
    assert_one_line_error(train(tmp_path / "r", "--no-reshard-after-forward"), 2, "--parallel fsdp")
