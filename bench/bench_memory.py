"""FSDP's meta build and returned freed blocks: the memory they save, their speed, llama-8b's set-up (issue 22).

Four parts, in one run, each printing a table for BENCHMARKS.md:

rss    125m on 4 gloo ranks, 2 steps (seq-len 64, global batch 4, micro-batch 1): peak RSS per rank of
       `clusterbench train --parallel ddp|fsdp` (run.json's train.summary.peak_memory_bytes), then of
       ranks this bench starts itself, which call loop.train as `clusterbench train` does, for every
       build (whole: models.build; meta: models.build_unfilled, each rank filling its shards) with
       glibc's freed blocks kept (its default) or returned (stages/train/host_memory.py). Each bench arm
       also gives the peak by the first forward, which is the set-up's (build, wrap, optimizer).
speed  tgs with the freed blocks kept against returned, tiny and 125m, DDP and FSDP, 2 ranks: rounds
       interleaved (the order flips each round), medians.
align  `clusterbench train --parallel fsdp --nproc N` on the default tiny task (100 steps, the shipped
       reference tiny-cpu-float32) at N = 1, 2, 4: verdict, variance, MRE.
8b     llama-8b on 8 gloo ranks, built on meta (no writes recorded) and sharded by loop.shard, never
       materialised: per rank the wall time of each, peak RSS and the bytes of its shards. Then the
       build that records writes (models.build_unfilled: each random init op run on a scratch CPU
       tensor, so every number the CPU build draws: 1.6e10 a rank, as torch's init and then
       transformers' both fill each weight) on --record-ranks ranks: 8 of them at once would hold
       8 x 2.1 GB of scratch on this 23.5 GiB machine. Its even ranks return freed blocks (as CPU ranks
       do), its odd ranks keep them (as GPU ranks do). Then stages/train/memory.py's arithmetic for 8 x 80 GB
       GPUs and 1 TB of host memory.

    python bench/bench_memory.py [--parts rss,speed,align,8b] [--rounds 3] [--record-ranks 2]
Targets: FSDP peak RSS per rank <= 0.5 x DDP's; alignment PASS at 1, 2 and 4 ranks; llama-8b fits.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist

from clusterbench.runtime import launch
from clusterbench.runtime.dist import Worker, resolve
from clusterbench.stages.train import deferred, host_memory, memory, models
from clusterbench.stages.train.data import load_task
from clusterbench.stages.train.loop import LoopConfig, shard, train
from clusterbench.stages.train.stage import MODEL_IMPORTS

GIB = 2**30
RSS_LOOP = LoopConfig(steps=2, warmup_steps=1, global_batch=4, micro_batch=1, lr=3e-4, lr_warmup_steps=10,
                      dtype="float32", parallel="ddp", activation_checkpointing=False)
RSS_ARGV = ["--preset", "125m", "--nproc", "4", "--steps", "2", "--warmup-steps", "1", "--seq-len", "64",
            "--global-batch", "4", "--micro-batch", "1"]
# Arms of the rss part: (parallel, build); each with the freed blocks kept and returned.
RSS_ARMS = [("ddp", "whole"), ("fsdp", "whole"), ("fsdp", "meta")]
SPEED_CASES = {  # the CLI's defaults for tiny; bench_train.py's 125m batch
    "tiny": LoopConfig(steps=30, warmup_steps=5, global_batch=16, micro_batch=4, lr=1e-3, lr_warmup_steps=10,
                       dtype="float32", parallel="ddp", activation_checkpointing=False),
    "125m": replace(RSS_LOOP, steps=6, warmup_steps=2),
}
GPUS, GPU_BYTES, HOST_BYTES = 8, 80e9, 1e12  # the node the issue sizes llama-8b for


@dataclass(frozen=True)
class Arm:
    """What one job of ranks runs: a preset trained under `cfg`, the model built `build`, freed blocks
    returned or kept; every rank writes its figures to out/rank<k>.json."""

    preset: str
    cfg: LoopConfig
    build: str  # "whole" or "meta"
    returned: bool
    out: Path


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _write(out: Path, worker: Worker, figures: dict) -> None:
    (out / f"rank{worker.rank}.json").write_text(json.dumps(figures))


def _read(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"), key=lambda p: int(p.stem[4:]))]


def train_job(worker: Worker, arm: Arm, progress) -> None:
    """As stages/train/measure.py sets a CPU rank up, less the run folder; the allocator setting as the arm says."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    if arm.returned:
        host_memory.return_freed_blocks()
    task = load_task(seq_len=64, packing=True, seed=0)
    spec = models.resolve(arm.preset, None, None)
    if arm.build == "meta":
        unfilled = models.build_unfilled(spec, 0)
        model, fill = unfilled.model, unfilled.fill
    else:
        model, fill = models.build(spec, 0), None
    at_forward: list[int] = []
    # The first forward comes after the build, the wrap (and fill) and the optimizer: the set-up's peak.
    hook = model.get_input_embeddings().register_forward_pre_hook(lambda *_: at_forward.append(peak_rss()) or None)
    usage: list[resource.struct_rusage] = []

    def on_step(r) -> None:
        if r.step == arm.cfg.warmup_steps:  # the timed window starts right after
            usage.append(resource.getrusage(resource.RUSAGE_SELF))

    result = train(worker, arm.cfg, model, task, on_step, fill=fill)
    end = resource.getrusage(resource.RUSAGE_SELF)
    hook.remove()
    window = [r for r in result.steps if r.in_window]
    tgs = sum(r.real_tokens for r in window) / (worker.world_size * result.window_s)
    # CPU time in the kernel and page faults per timed step: what mapping and unmapping blocks costs,
    # counted by the kernel, so other load on the machine does not blur them as it blurs tgs.
    _write(arm.out, worker, {"peak": peak_rss(), "setup_peak": at_forward[0], "tgs": tgs,
                             "sys_s": (end.ru_stime - usage[0].ru_stime) / len(window),
                             "user_s": (end.ru_utime - usage[0].ru_utime) / len(window),
                             "faults": (end.ru_minflt - usage[0].ru_minflt) / len(window)})


def _launch(fn, payload, nproc: int) -> None:
    outcome = launch.run(launch.Job(fn, payload, resolve("gloo", "cpu", timeout_s=900), imports=MODEL_IMPORTS), nproc)
    if outcome.code != 0:
        raise SystemExit(f"ranks failed: {outcome.message}")


def _arm(tmp: Path, name: str, preset: str, cfg: LoopConfig, build: str, returned: bool, nproc: int) -> list[dict]:
    out = tmp / name
    out.mkdir(parents=True)
    _launch(train_job, Arm(preset, cfg, build, returned, out), nproc)
    return _read(out)


def _cli_train(tmp: Path, name: str, argv: list[str]) -> dict:
    """`clusterbench train ARGV` into its own run folder, unrecorded; its run.json's train part."""
    out = tmp / name
    cmd = [sys.executable, "-m", "clusterbench", "train", *argv, "--out", str(out), "--store", "off"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    train_doc = (json.loads((out / "run.json").read_text()).get("train") if (out / "run.json").exists() else None)
    return {"rc": proc.returncode, "train": train_doc, "tail": proc.stdout.strip().splitlines()[-3:]
            + proc.stderr.strip().splitlines()[-3:]}


def rss_part(tmp: Path) -> None:
    print("## rss: 125m, 4 gloo ranks, 2 steps, seq-len 64, global batch 4, micro-batch 1", flush=True)
    cli = {}
    for parallel in ("ddp", "fsdp"):
        run = _cli_train(tmp, f"cli-{parallel}", [*RSS_ARGV, "--parallel", parallel, "--peak-tflops", "1"])
        if run["rc"] != 0 or run["train"] is None:
            raise SystemExit(f"clusterbench train --parallel {parallel} failed: {run['tail']}")
        cli[parallel] = run["train"]["summary"]
    print("\n`clusterbench train` (freed blocks returned on CPU ranks, as shipped):\n")
    print("| --parallel | peak RSS per rank | model state per rank | weights |\n|---|---:|---:|---|")
    for parallel, s in cli.items():
        print(f"| {parallel} | {s['peak_memory_bytes'] / GIB:.2f} GiB | {s['model_state_bytes'] / GIB:.3f} GiB "
              f"| {s['weights']} |")
    ratio = cli["fsdp"]["peak_memory_bytes"] / cli["ddp"]["peak_memory_bytes"]
    print(f"\nFSDP / DDP peak RSS: **{ratio:.3f}** (target <= 0.5: {'met' if ratio <= 0.5 else 'NOT met'})\n",
          flush=True)
    rows = []
    for parallel, build in RSS_ARMS:
        for returned in (False, True):
            name = f"{parallel}-{build}-{'returned' if returned else 'kept'}"
            ranks = _arm(tmp, name, "125m", replace(RSS_LOOP, parallel=parallel), build, returned, 4)
            rows.append((parallel, build, returned, ranks))
    print("Ranks started by this bench, loop.train as `clusterbench train` runs it (max over the 4 ranks; "
          "each rank's peak in brackets):\n")
    print("| parallel | build | freed blocks | peak RSS by the first forward | peak RSS per rank |\n"
          "|---|---|---|---:|---:|")
    for parallel, build, returned, ranks in rows:
        peaks = [r["peak"] / GIB for r in ranks]
        print(f"| {parallel} | {build} | {'returned' if returned else 'kept'} "
              f"| {max(r['setup_peak'] for r in ranks) / GIB:.2f} GiB "
              f"| {max(peaks):.2f} GiB ({' '.join(f'{p:.2f}' for p in peaks)}) |")
    print(flush=True)


def speed_part(tmp: Path, rounds: int) -> None:
    print(f"## speed: tgs with freed blocks kept / returned, 2 gloo ranks, {rounds} interleaved rounds, medians\n",
          flush=True)
    figures: dict[tuple[str, str, bool], list[dict]] = {}
    for k in range(rounds):
        for preset, cfg in SPEED_CASES.items():
            for parallel in ("ddp", "fsdp"):
                order = (False, True) if k % 2 == 0 else (True, False)
                for returned in order:
                    build = "meta" if parallel == "fsdp" else "whole"  # as `clusterbench train` builds
                    ranks = _arm(tmp, f"speed-{k}-{preset}-{parallel}-{returned}", preset,
                                 replace(cfg, parallel=parallel), build, returned, 2)
                    figures.setdefault((preset, parallel, returned), []).append(ranks[0])
    print("| preset | parallel | steps (timed) | tgs kept | tgs returned | returned / kept | rounds kept | "
          "rounds returned |\n|---|---|---:|---:|---:|---:|---|---|")
    for preset, cfg in SPEED_CASES.items():
        for parallel in ("ddp", "fsdp"):
            kept, ret = ([f["tgs"] for f in figures[(preset, parallel, r)]] for r in (False, True))
            print(f"| {preset} | {parallel} | {cfg.steps} ({cfg.steps - cfg.warmup_steps}) "
                  f"| {statistics.median(kept):,.1f} | {statistics.median(ret):,.1f} "
                  f"| **{statistics.median(ret) / statistics.median(kept):.3f}** "
                  f"| {', '.join(f'{x:,.1f}' for x in kept)} | {', '.join(f'{x:,.1f}' for x in ret)} |")
    print("\nRank 0 per timed step, medians (kept / returned):\n")
    print("| preset | parallel | CPU s in the kernel | CPU s in user space | minor page faults |\n"
          "|---|---|---:|---:|---:|")
    for preset in SPEED_CASES:
        for parallel in ("ddp", "fsdp"):
            med = {key: [statistics.median(f[key] for f in figures[(preset, parallel, r)]) for r in (False, True)]
                   for key in ("sys_s", "user_s", "faults")}
            print(f"| {preset} | {parallel} | {med['sys_s'][0]:.3f} / {med['sys_s'][1]:.3f} "
                  f"| {med['user_s'][0]:.3f} / {med['user_s'][1]:.3f} "
                  f"| {med['faults'][0]:,.0f} / {med['faults'][1]:,.0f} |")
    print(flush=True)


def align_part(tmp: Path) -> None:
    print("## align: `clusterbench train --parallel fsdp --nproc N`, the default tiny task\n", flush=True)
    print("| ranks | verdict | reference | variance | MRE | max abs deviation | weights | wall |\n"
          "|---:|---|---|---:|---:|---:|---|---:|")
    for n in (1, 2, 4):
        t0 = time.perf_counter()
        run = _cli_train(tmp, f"align-{n}", ["--parallel", "fsdp", "--nproc", str(n), "--peak-tflops", "1"])
        wall = time.perf_counter() - t0
        a = (run["train"] or {}).get("alignment")
        if run["rc"] != 0 or a is None:
            print(f"| {n} | exit {run['rc']}, no alignment: {' / '.join(run['tail'])} | | | | | | {wall:.0f} s |")
            continue
        print(f"| {n} | {a['verdict']} | {a['reference']} | {a['variance']:.3g} | {a['mre']:.3g} "
              f"| {a['max_abs_dev']:.3g} | {run['train']['summary']['weights']} | {wall:.0f} s |", flush=True)
    print(flush=True)


@dataclass(frozen=True)
class ShardArm:
    record: bool  # models.build_unfilled (writes recorded, random draws made) or a bare meta build
    out: Path


def shard_job(worker: Worker, arm: ShardArm, progress) -> None:
    """llama-8b built on meta and sharded, never materialised; this rank's figures. Freed blocks are
    returned as on a CPU rank of `clusterbench train`, except on the odd ranks of the recorded build,
    which keep them as a GPU rank does (stages/train/measure.py sets the threshold on CPU ranks only)."""
    returned = not (arm.record and worker.rank % 2)
    if returned:
        host_memory.return_freed_blocks()
    spec = models.resolve("llama-8b", None, None)
    start = peak_rss()
    t0 = time.perf_counter()
    if arm.record:
        model = models.build_unfilled(spec, 0).model
    else:
        model, _ = deferred.build_on_meta(lambda: models.build(spec, 0), record=False)
    build_s = time.perf_counter() - t0
    built_peak, built_now = peak_rss(), rss_now()
    decoder = model.get_decoder()
    groups = {"decoder layer": sum(p.numel() for p in decoder.layers[0].parameters()),
              "embedding": model.get_input_embeddings().weight.numel(),
              "norm and output layer": sum(p.numel() for m in (decoder.norm, model.get_output_embeddings())
                                           for p in m.parameters())}
    params, largest = models.count_params(model), max(p.numel() for p in model.parameters())
    dist.barrier()  # the shard is timed from the same start on every rank
    t0 = time.perf_counter()
    model = shard(model, replace(RSS_LOOP, parallel="fsdp"))
    shard_s = time.perf_counter() - t0
    local = [p.to_local() for p in model.parameters() if hasattr(p, "to_local")]
    _write(arm.out, worker, {
        "returned": returned, "start_peak": start, "build_s": build_s, "built_peak": built_peak,
        "built_now": built_now,
        "shard_s": shard_s, "peak": peak_rss(), "now": rss_now(), "params": params, "largest": largest,
        "groups": groups, "local_bytes": sum(t.numel() * t.element_size() for t in local),
        "not_sharded": sum(1 for p in model.parameters() if not hasattr(p, "to_local")),
        "on_meta": all(t.is_meta for t in local)})


def _shard_table(ranks: list[dict]) -> None:
    print("| rank | freed blocks | build s | shard s | peak RSS at start | after build | after shard | RSS now "
          "| local shards |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for k, r in enumerate(ranks):
        print(f"| {k} | {'returned' if r['returned'] else 'kept'} | {r['build_s']:.1f} | {r['shard_s']:.2f} "
              f"| {r['start_peak'] / GIB:.2f} GiB "
              f"| {r['built_peak'] / GIB:.2f} GiB | {r['peak'] / GIB:.2f} GiB | {r['now'] / GIB:.2f} GiB "
              f"| {r['local_bytes'] / 1e9:.3f} GB |")
    print(f"\nparameters not sharded: {max(r['not_sharded'] for r in ranks)}; shards still on meta: "
          f"{all(r['on_meta'] for r in ranks)}\n", flush=True)


def llama_part(tmp: Path, record_ranks: int) -> None:
    print("## 8b: llama-8b built on meta and sharded over 8 gloo ranks, never materialised\n", flush=True)
    (tmp / "8b-meta").mkdir()
    _launch(shard_job, ShardArm(False, tmp / "8b-meta"), 8)
    ranks = _read(tmp / "8b-meta")
    print("Built on meta without recording (deferred.build_on_meta(..., record=False)), 8 ranks:\n")
    _shard_table(ranks)
    (tmp / "8b-record").mkdir()
    _launch(shard_job, ShardArm(True, tmp / "8b-record"), record_ranks)
    recorded = _read(tmp / "8b-record")
    print(f"Built by models.build_unfilled (writes recorded, each random op drawn on a scratch CPU tensor), "
          f"{record_ranks} ranks at once on this machine's 2 cores:\n")
    _shard_table(recorded)
    _arithmetic(ranks[0], max(r["peak"] for r in ranks), recorded)


def _arithmetic(r: dict, baseline: int, recorded: list[dict]) -> None:
    params, largest, groups = r["params"], r["largest"], r["groups"]
    state = memory.model_state(params, GPUS, "fsdp").bytes
    widest = max(groups, key=groups.get)
    gathered, grad32 = groups[widest] * 2, groups[widest] * 4
    fill_host, old = largest * 4 + baseline, params * 4
    measured = {way: max((x["built_peak"] for x in recorded if x["returned"] == (way == "returned")), default=None)
                for way in ("returned", "kept")}
    print(f"llama-8b: {params:,} parameters; by stages/train/memory.py on {GPUS} x {GPU_BYTES / 1e9:.0f} GB GPUs, "
          f"{HOST_BYTES / 1e12:.0f} TB host:\n")
    print("| figure | new: meta build, shards filled | old: built whole on every rank |\n|---|---:|---:|")
    print(f"| model state per GPU (16 B x params / {GPUS}) | {state / 1e9:.2f} GB | {state / 1e9:.2f} GB after "
          f"sharding; {old / 1e9:.1f} GB (float32 model) on each GPU before |")
    print("| largest FSDP group gathered, bf16: " + ", ".join(f"{k} {v * 2 / 1e9:.2f} GB" for k, v in groups.items())
          + f" | {gathered / 1e9:.2f} GB ({widest}) | same |")
    print(f"| its gradient in float32 for the reduce-scatter (reduce_dtype float32) | {grad32 / 1e9:.2f} GB | same |")
    gpu = state + gathered + grad32
    print(f"| GPU: model state + the gathered group + its float32 gradient | {gpu / 1e9:.2f} GB of "
          f"{GPU_BYTES / 1e9:.0f} (activations besides) | {old / 1e9:.1f} GB before sharding, then the same |")
    print(f"| during the fill, one whole parameter in float32 (the largest, {largest:,} elements) | "
          f"{largest * 4 / 1e9:.2f} GB on the host, and on the GPU (distribute_tensor moves it there first) | - |")
    print(f"| host memory per rank during set-up | {fill_host / 1e9:.2f} GB (largest parameter + the "
          f"{baseline / 1e9:.2f} GB process measured after build and shard) | {(old + baseline) / 1e9:.1f} GB |")
    print(f"| host memory per node ({GPUS} ranks) | {GPUS * fill_host / 1e9:.1f} GB of "
          f"{HOST_BYTES / 1e9:,.0f} | {GPUS * (old + baseline) / 1e9:.0f} GB of {HOST_BYTES / 1e9:,.0f} |")
    for way, peak in measured.items():
        if peak is not None:
            print(f"| measured: the recorded build's peak RSS per rank, freed blocks {way}; x {GPUS} ranks "
                  f"| {peak / 1e9:.2f} GB; {GPUS * peak / 1e9:.1f} GB | - |")
    print("\nGPU ranks keep freed blocks today (stages/train/measure.py holds the threshold on CPU ranks only), "
          "and each adds its CUDA context to the baseline.\n", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", default="rss,speed,align,8b", help="comma-separated: rss, speed, align, 8b")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the speed part")
    p.add_argument("--record-ranks", type=int, default=2, help="ranks of the recorded llama-8b build")
    a = p.parse_args()
    parts = [x.strip() for x in a.parts.split(",") if x.strip()]
    unknown = set(parts) - {"rss", "speed", "align", "8b"}
    if unknown or a.rounds < 1 or a.record_ranks < 1:
        p.error(f"unknown part {sorted(unknown)}" if unknown else "--rounds and --record-ranks must be >= 1")
    with tempfile.TemporaryDirectory() as tmp:
        for part in parts:
            t0 = time.perf_counter()
            if part == "rss":
                rss_part(Path(tmp))
            elif part == "speed":
                speed_part(Path(tmp), a.rounds)
            elif part == "align":
                align_part(Path(tmp))
            else:
                llama_part(Path(tmp), a.record_ranks)
            print(f"({part}: {time.perf_counter() - t0:.0f} s)\n", flush=True)


if __name__ == "__main__":
    main()
