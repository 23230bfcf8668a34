"""`clusterbench train` and `clusterbench align`: options in, ranks launched, run folder out.

Exit codes: 0 when the run completes and, if it was judged, PASSes; 1 (RunFailed) when the
alignment verdict is FAIL or a loss turns NaN/inf (the steps measured so far are kept);
2 (UsageError) for bad input, a mismatched reference and out of memory.
"""

from __future__ import annotations

import argparse
import math
import resource
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from clusterbench import launch
from clusterbench.comm.command import world_size
from clusterbench.dist import DistConfig, Worker, device_name, environment, resolve
from clusterbench.errors import RunFailed, UsageError
from clusterbench.hw.command import record_hardware
from clusterbench.launch import Progress
from clusterbench.results import RunFolder, default_run_dir, load_run, prepare_run_dir
from clusterbench.train import alignment, display, flops, models, reference
from clusterbench.train.data import load_task
from clusterbench.train.loop import DTYPES, LoopConfig, StepResult, out_of_memory, train

STEP_COLUMNS = ["step", "loss", "tokens", "real_tokens", "loss_tokens", "seconds", "tgs", "in_window"]
# The task of a CPU run: small enough to train 100 steps on two cores in seconds.
CPU_DEFAULTS = {"preset": "tiny", "seq_len": 64, "global_batch": 16, "micro_batch": 4, "dtype": "float32"}
GPU_DEFAULTS = {"preset": "llama-1b", "seq_len": 2048, "global_batch": 32, "micro_batch": 4, "dtype": "bfloat16"}
GPU_SMALL_PRESET, GPU_SMALL_BYTES = "125m", 40 * 1024**3  # below this, llama-1b + Adam does not fit


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--preset", default=None, help=f"{', '.join(models.PRESETS)} (default: tiny on CPU, "
                   "llama-1b on a GPU with 40 GiB or more, else 125m)")
    g.add_argument("--model-config", default=None, help="any causal-LM config.json (fresh weights from --seed)")
    g.add_argument("--model-path", default=None, help="a local transformers checkpoint directory")
    g = p.add_argument_group("task")
    g.add_argument("--data", default=None, help="SFT JSONL, alpaca or chat form (default: the shipped set)")
    g.add_argument("--tokenizer", default=None, help="tokenizer.json or its directory (default: shipped)")
    g.add_argument("--seq-len", type=int, default=None, help="tokens per row (default 64 CPU, 2048 GPU)")
    g.add_argument("--packing", action=argparse.BooleanOptionalAction, default=True,
                   help="pack examples into full rows (default) or pad each to --seq-len")
    g.add_argument("--global-batch", type=int, default=None, help="rows per optimizer step, any world size "
                   "(default 16 CPU, 32 GPU)")
    g.add_argument("--micro-batch", type=int, default=None, help="rows per forward pass per rank (default 4)")
    g.add_argument("--steps", type=int, default=100, help="optimizer steps (default 100)")
    g.add_argument("--warmup-steps", type=int, default=5, help="untimed steps before the window (default 5)")
    g.add_argument("--lr", type=float, default=None, help="peak learning rate (default 1e-3 tiny, else 3e-4)")
    g.add_argument("--lr-warmup-steps", type=int, default=10, help="linear lr ramp, then constant (default 10)")
    g.add_argument("--seed", type=int, default=0, help="weights and data order (default 0)")
    g = p.add_argument_group("execution")
    g.add_argument("--dtype", choices=tuple(DTYPES), default=None, help="default float32 CPU, bfloat16 GPU")
    g.add_argument("--parallel", choices=("ddp", "fsdp"), default="ddp", help="data parallelism (default ddp)")
    g.add_argument("--activation-checkpointing", action="store_true", help="recompute layer activations")
    g.add_argument("--peak-tflops", type=float, default=None, help="peak for MFU (skips table and measurement)")
    g = p.add_argument_group("alignment")
    g.add_argument("--reference", default=None, help="reference file or shipped name (default: the shipped "
                   "curve of this preset, device and dtype when the task matches it)")
    g.add_argument("--save-reference", default=None, metavar="FILE", help="write this run as a reference")
    g.add_argument("--repeats", type=int, default=1, help="run the task K times; the noise band of "
                   "--save-reference comes from them (default 1)")
    add_limit_arguments(g)


def add_limit_arguments(g: Any) -> None:
    g.add_argument("--mre-limit", type=float, default=None, help="replace the MRE limit (default "
                   "max(0.02, reference noise band))")
    g.add_argument("--variance-limit", type=float, default=None, help="replace the variance limit")


@dataclass(frozen=True)
class TrainJob:
    model: models.ModelSpec
    loop: LoopConfig
    data: str | None
    tokenizer: str | None
    seq_len: int
    packing: bool
    seed: int
    repeats: int
    peak_tflops: float | None
    config: dict[str, Any]  # train.config of run.json, completed by rank 0 once the model exists
    reference: dict[str, Any] | None  # the curve to judge by; None: not judged
    reference_label: str | None
    reference_note: str | None  # why a shipped reference was not used
    limits: tuple[float | None, float | None]  # user variance, mre limits
    save_reference: str | None
    run_dir: Path
    argv: tuple[str, ...]


def _positive(value: float | None, option: str, minimum: float = 1) -> None:
    if value is not None and not (math.isfinite(value) and value >= minimum):
        raise UsageError(f"{option} must be a number of at least {minimum:g}, got {value:g}")


def build_job(args: argparse.Namespace, cfg: DistConfig, n: int) -> TrainJob:
    """Resolve defaults and refuse bad settings before any rank starts."""
    defaults = dict(GPU_DEFAULTS if cfg.device_type == "cuda" else CPU_DEFAULTS)
    if cfg.device_type == "cuda" and torch.cuda.get_device_properties(0).total_memory < GPU_SMALL_BYTES:
        defaults["preset"] = GPU_SMALL_PRESET
    preset = args.preset or (None if args.model_config or args.model_path else defaults["preset"])
    spec = models.resolve(preset, args.model_config, args.model_path)
    seq_len = args.seq_len or defaults["seq_len"]
    global_batch = args.global_batch or defaults["global_batch"]
    for value, option in ((seq_len, "--seq-len"), (global_batch, "--global-batch"), (args.micro_batch, "--micro-batch"),
                          (args.steps, "--steps"), (args.repeats, "--repeats")):
        _positive(value, option)
    _positive(args.warmup_steps, "--warmup-steps", 0)
    _positive(args.lr_warmup_steps, "--lr-warmup-steps", 0)
    if args.warmup_steps >= args.steps:
        raise UsageError(f"--warmup-steps {args.warmup_steps} leaves no timed step of --steps {args.steps}")
    if spec.max_positions and seq_len > spec.max_positions:
        raise UsageError(f"--seq-len {seq_len} is longer than model {spec.name} can take "
                         f"(max_position_embeddings {spec.max_positions})")
    per_rank, rem = divmod(global_batch, n)
    micro = args.micro_batch or max(d for d in range(1, defaults["micro_batch"] + 1) if per_rank % d == 0) \
        if per_rank else args.micro_batch or 1
    if rem or per_rank % micro:
        raise UsageError(f"--global-batch {global_batch} is not divisible into micro-batches of {micro} "
                         f"on {n} ranks (it must be a multiple of {micro} x {n} = {micro * n})")
    lr = args.lr if args.lr is not None else (1e-3 if spec.name == "tiny" else 3e-4)
    if not (math.isfinite(lr) and lr > 0):
        raise UsageError(f"--lr must be positive, got {lr:g}")
    loop = LoopConfig(steps=args.steps, warmup_steps=args.warmup_steps, global_batch=global_batch, micro_batch=micro,
                      lr=lr, lr_warmup_steps=args.lr_warmup_steps, dtype=args.dtype or defaults["dtype"],
                      parallel=args.parallel, activation_checkpointing=args.activation_checkpointing)
    _positive(args.peak_tflops, "--peak-tflops", 1e-9)
    # Loaded here too (the ranks load their own) so bad data fails before any rank starts.
    task = load_task(args.data, args.tokenizer, seq_len, args.packing, args.seed)
    if task.vocab_size > spec.config.get("vocab_size", task.vocab_size):
        raise UsageError(f"the tokenizer has {task.vocab_size} tokens, model {spec.name} only "
                         f"{spec.config['vocab_size']}")
    config = run_config(spec, loop, task.name, n, seq_len, args.packing, args.seed, args.repeats)
    ref, label, note = None, None, None
    name = args.reference or reference.shipped_name(spec.name, cfg.device_type, loop.dtype)
    if args.reference is not None or name in reference.shipped_names():
        ref, label = reference.load(name)
        ref, note = judge_against(ref, label, args.reference is not None, config)
    if args.save_reference:
        reference.check_writable(args.save_reference)
    run_dir = Path(args.out) if args.out else default_run_dir("train")
    return TrainJob(spec, loop, args.data, args.tokenizer, seq_len, args.packing, args.seed, args.repeats,
                    args.peak_tflops, config, ref, label, note, (args.variance_limit, args.mre_limit),
                    args.save_reference, run_dir, tuple(sys.argv))


def main(args: argparse.Namespace) -> int:
    cfg = resolve(args.backend, args.device, args.timeout)
    n = world_size(args, cfg)
    job = build_job(args, cfg, n)
    joined = launch.launched_by()
    if joined is None or joined.rank == 0:
        prepare_run_dir(job.run_dir)
    return launch.run(launch.Job(train_job, job, cfg, job.run_dir), n)


def _reduce(worker: Worker, values: list[float], op: dist.ReduceOp) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=worker.device)
    dist.all_reduce(t, op=op)
    return t.tolist()


def choose_peak(worker: Worker, job: TrainJob) -> flops.Peak:
    """The peak for MFU: given, else the table for every rank's device, else measured (REFERENCE.md §3)."""
    dtype = job.loop.dtype
    if job.peak_tflops is not None:
        return flops.Peak(job.peak_tflops, f"given: --peak-tflops {job.peak_tflops:g}")
    table = flops.table_peak(device_name(worker.device), dtype)
    (all_listed,) = _reduce(worker, [1.0 if table else 0.0], dist.ReduceOp.MIN)
    if all_listed and table is not None:
        return table
    m = flops.measured_peak(str(worker.device), dtype)
    (total,) = _reduce(worker, [m["tflops"]], dist.ReduceOp.SUM)
    mean = total / worker.world_size
    return flops.Peak(mean, flops.measured_source(m["n"], dtype, mean, worker.world_size))


def peak_memory(worker: Worker) -> tuple[int, str]:
    """Largest peak over the ranks: allocator peak on a GPU, process max RSS on a CPU."""
    if worker.device.type == "cuda":
        mine, kind = torch.cuda.max_memory_allocated(worker.device), "torch.cuda.max_memory_allocated"
    else:
        mine, kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "process max RSS (CPU)"
    (most,) = _reduce(worker, [float(mine)], dist.ReduceOp.MAX)
    return int(most), kind


def run_config(spec: models.ModelSpec, lp: LoopConfig, task_name: str, world: int, seq_len: int,
               packing: bool, seed: int, repeats: int) -> dict[str, Any]:
    return {
        "preset": spec.name, "model_params": None, "model_config": spec.config, "model_hash": spec.config_hash,
        "parallel": lp.parallel, "dtype": lp.dtype, "world_size": world,
        "global_batch": lp.global_batch, "micro_batch": lp.micro_batch,
        "grad_accum": lp.global_batch // (lp.micro_batch * world),
        "seq_len": seq_len, "packing": packing, "steps": lp.steps, "warmup_steps": lp.warmup_steps,
        "lr": lp.lr, "lr_warmup_steps": lp.lr_warmup_steps, "seed": seed, "task": task_name,
        "activation_checkpointing": lp.activation_checkpointing, "repeats": repeats,
    }


def judge_against(ref: dict[str, Any], label: str, explicit: bool,
                  config: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The reference to judge by; for a shipped one this task does not match, (None, why not)."""
    why = reference.mismatch(ref, config)
    if explicit:
        if why:
            raise UsageError(f"--reference {label}: {why}")
        return ref, None
    for key in ("seed", "lr", "lr_warmup_steps", "dtype"):
        if why is None and ref.get(key) != config[key]:
            why = f"it was made with {key} {ref.get(key)}, this run has {config[key]}"
    return (None, f"not judged against the shipped {label}: {why}") if why else (ref, None)


def train_job(worker: Worker, job: TrainJob, progress: Progress) -> None:
    """`clusterbench train` on every rank: its own run folder, then the benchmark."""
    folder = RunFolder(job.run_dir, "train", list(job.argv)) if worker.is_main else None
    if folder is not None:
        record_hardware(folder)
    failures = run_train(worker, job, progress, folder)
    if folder is not None:
        print(f"# results: {folder.path}/run.json, {folder.path}/train_steps.csv", flush=True)
        folder.finish("failed" if failures else "complete", failures[0] if failures else None)
        if failures:
            raise RunFailed(failures[0])


def run_train(worker: Worker, job: TrainJob, progress: Progress, folder: RunFolder | None) -> list[str]:
    """Every rank: load, train (K times with --repeats); rank 0 records, judges and returns the failures."""
    if worker.device.type == "cpu":
        torch.use_deterministic_algorithms(True, warn_only=True)
    progress.at("loading data")
    task = load_task(job.data, job.tokenizer, job.seq_len, job.packing, job.seed)
    config = dict(job.config)
    env = environment(worker)
    progress.at("measuring the peak")
    peak = choose_peak(worker, job)
    curves: list[list[float]] = []
    result = None
    try:
        for k in range(job.repeats):
            progress.at(f"building the model (run {k + 1})")
            model = models.build(job.model, job.seed)
            config.update(model_params=models.count_params(model), model_config=model.config.to_dict())
            record = _Recorder(folder, worker.world_size, job.loop.steps, config, env) if k == 0 else None
            try:
                outcome = train(worker, job.loop, model, task, record.step if record else (lambda r: None))
            except (torch.OutOfMemoryError, RuntimeError) as e:
                raise out_of_memory(e, job.loop, job.seq_len) or e
            del model
            curves.append([r.loss for r in outcome.steps])
            result = result or outcome
            if outcome.status != "complete":
                break
    finally:
        if folder is not None:
            folder.flush()  # the steps measured so far survive any failure
    memory, kind = peak_memory(worker)
    if folder is None:
        return []
    assert result is not None
    summary = flops.summarize([_row(r, worker.world_size) for r in result.steps], result.window_s,
                              worker.world_size, flops.dims_of(config["model_config"]), job.loop.global_batch,
                              job.seq_len, job.loop.activation_checkpointing, peak)
    summary.update(peak_memory_bytes=memory, peak_memory_kind=kind, status=result.status)
    return _finish(job, folder, config, env, summary, curves)


def _finish(job: TrainJob, folder: RunFolder, config: dict[str, Any], env: dict[str, Any],
            summary: dict[str, Any], curves: list[list[float]]) -> list[str]:
    """Rank 0: summary, alignment, reference file; the reasons the run failed, if any."""
    train_doc = folder.doc["train"]
    train_doc["summary"] = summary
    if len(curves) > 1:
        train_doc["repeat_losses"] = curves[1:]
    ref = job.reference
    if ref is not None:
        limits = alignment.limits_for(ref["losses"], ref["noise_band"], *job.limits)
        train_doc["alignment"] = alignment.compare(curves[0], ref["losses"], limits, config["steps"],
                                                   job.reference_label)
    folder.save()
    print(display.summary(summary), flush=True)
    if job.reference_note:
        print(f"# {job.reference_note}", flush=True)
    failures = [f"loss became {curves[0][-1]} at step {len(curves[0])}"] if summary["status"] == "nan" else []
    if train_doc["alignment"] is not None:
        print(display.alignment_table(train_doc["alignment"]), flush=True)
        if train_doc["alignment"]["verdict"] == "FAIL":
            failures.append("alignment FAIL: " + "; ".join(train_doc["alignment"]["reasons"]))
    if job.save_reference and summary["status"] == "complete":
        reference.save(reference.make(config, curves, env, list(job.argv)), job.save_reference)
        print(f"# reference written: {job.save_reference}", flush=True)
    return failures


def _row(r: StepResult, world: int) -> dict[str, Any]:
    return {**asdict(r), "tgs": r.real_tokens / (world * r.seconds) if r.seconds > 0 else None}


class _Recorder:
    """Rank 0's per-step duties: the progress line and the run folder rows, as they arrive."""

    def __init__(self, folder: RunFolder | None, world: int, steps: int, config: dict[str, Any],
                 env: dict[str, Any]) -> None:
        self.folder, self.world = folder, world
        self.display = display.ProgressLine(steps, world) if folder else None
        if folder is not None:
            folder.update_env(env)
            folder.set("train", {"config": config, "summary": None, "losses": [], "alignment": None})
            print(display.header(config, env), flush=True)

    def step(self, r: StepResult) -> None:
        if self.folder is None:
            return
        self.display.update(r)
        self.folder.doc["train"]["losses"].append(r.loss)
        # At most one run-folder write a second, so recording never slows the steps it times.
        self.folder.append("train_steps", _row(r, self.world), STEP_COLUMNS, min_interval_s=1.0)


def add_align_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a train run folder or its run.json")
    p.add_argument("--reference", required=True, help="reference file or shipped name")
    add_limit_arguments(p)


def align_main(args: argparse.Namespace) -> int:
    """Judge a finished run against a reference; exit 1 on FAIL."""
    doc = load_run(args.run)
    train_doc = doc.get("train")
    if not isinstance(train_doc, dict) or not train_doc.get("config"):
        raise UsageError(f"{args.run}: not a clusterbench train run (run.json has no train section)")
    ref, label = reference.load(args.reference)
    why = reference.mismatch(ref, train_doc["config"])
    if why:
        raise UsageError(f"--reference {label}: {why}")
    limits = alignment.limits_for(ref["losses"], ref["noise_band"], args.variance_limit, args.mre_limit)
    result = alignment.compare(train_doc["losses"], ref["losses"], limits, train_doc["config"]["steps"], label)
    print(display.alignment_table(result))
    if result["verdict"] == "FAIL":
        raise RunFailed("alignment FAIL: " + "; ".join(result["reasons"]))
    return 0

