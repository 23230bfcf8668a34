#!/usr/bin/env bash
# Every GPU path of clusterbench in one pass (issues 10, 11): NVML and topology, peaks, NCCL
# collectives in each timing mode and with their buffers held still, the NCCL log read back by
# `diagnose`, training (tiny float32 against the CPU curve: the canary's tolerance; llama-1b bf16
# with DDP and FSDP, and with each lever of issue 22; llama-8b set up on meta), `run --quick` (the
# numerics canary, NVML telemetry, expected figures), and with several GPUs the benches against a
# bare torch loop and of the telemetry sampler. About 10-13 minutes on one H200. Runs from the
# checkout with no install (PYTHONPATH=src): the GPU machine has torch, CUDA and NCCL already.
# Leaves every run folder and summary.txt under $OUT (default ./gpu-check). The step limits add up
# to 48 minutes; a healthy H200 should need about a third of that (not yet run: no device was lent
# since the levers were added). A lent device allows 10 minutes a command, so the script stops starting
# steps once BUDGET seconds (default 540) are spent, cuts the last one's limit to what is left, and says
# which it skipped; ONLY="comm-loop check burnin" runs just the steps named, for a second call.
#
#     bash tools/gpu_check.sh                       # on the GPU machine, from the repository root
#     ONLY="counters copies check burnin" bash tools/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
# Nothing recorded in a results store: the lent machine's Python may lack the store's packages, and its runs
# belong to no fleet's history.
export CLUSTERBENCH_STORE=${CLUSTERBENCH_STORE:-off}
PY=${PYTHON:-python3}
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
NGPU=$($PY -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
echo "# gpu_check $(date -u +%FT%TZ) on $(hostname): $NGPU GPU(s); $($PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))' 2>&1)" | tee -a "$SUMMARY"
# NCCL refuses two ranks on one GPU: with one GPU the collectives run at world size 1 (no busbw, every
# code path still runs) and the ops that need a peer are left out, so batched send/recv is not
# exercised on NCCL there.
NP=$(( NGPU > 0 ? NGPU : 1 ))
OPS=all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,reduce,gather,scatter
(( NP > 1 )) && OPS=$OPS,pt2pt,sendrecv

BUDGET=${BUDGET:-540}
ONLY=${ONLY:-}

step() {  # step NAME TIMEOUT_S CMD...: run it, keep its output, note its exit code and last lines
  local name=$1 limit=$2; shift 2
  if [[ -n $ONLY && " $ONLY " != *" $name "* ]]; then return; fi
  if (( SECONDS >= BUDGET )); then
    echo "$name skipped: the budget of ${BUDGET}s is spent (run it with ONLY=\"$name\")" | tee -a "$SUMMARY"
    return
  fi
  (( limit > BUDGET - SECONDS )) && limit=$(( BUDGET - SECONDS ))
  local start=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  printf '%-22s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - start))" "$*" | tee -a "$SUMMARY"
  grep -E '^(# |  (PASS|WARN|FAIL|CRITICAL|WARNING)|clusterbench:|tgs|  tgs|  MFU|  TFLOPS|  variance|  MRE|  max abs|  peak memory|  model state|step 1/)' "$OUT/$name.log" \
    | tail -n 16 \
    | sed 's/^/    /' >>"$SUMMARY"
}

CB=("$PY" -m clusterbench)
step info 60 "${CB[@]}" info --out "$OUT/info"
step peak 120 "${CB[@]}" peak --dtypes bfloat16,float16,float32 --seconds 1 --out "$OUT/peak"
for timing in loop stamps graph; do
  step "comm-$timing" 90 "${CB[@]}" comm --nproc "$NP" --backend nccl --ops "$OPS" -e 256M --timing "$timing" \
    --out "$OUT/comm-$timing"
done
# The buffers held still (--no-rotate) against comm-loop above, which moves them as nccl-tests does: where a size
# fits the 50-60 MB L2, held still it is timed warm (issue 22).
step comm-fixed 60 "${CB[@]}" comm --nproc "$NP" --backend nccl --ops all_reduce,all_gather -e 256M --timing loop \
  --no-rotate --out "$OUT/comm-fixed"
step comm-bf16-avg 60 "${CB[@]}" comm --nproc "$NP" --backend nccl --ops all_reduce,reduce_scatter --dtype bfloat16 \
  --reduce-op avg -e 64M --out "$OUT/comm-bf16-avg"
step diagnose 30 "${CB[@]}" diagnose "$OUT/comm-loop"
# The canary's task against the CPU curve: its variance and MRE are the float32 tolerance a GPU needs.
step train-tiny 90 "${CB[@]}" train --nproc "$NP" --preset tiny --dtype float32 --seq-len 64 --global-batch 16 \
  --reference tiny-cpu-float32 --out "$OUT/train-tiny"
step train-1b-ddp 120 "${CB[@]}" train --nproc "$NP" --preset llama-1b --dtype bfloat16 --parallel ddp --steps 20 \
  --out "$OUT/train-1b-ddp"
step train-1b-fsdp 120 "${CB[@]}" train --nproc "$NP" --preset llama-1b --dtype bfloat16 --parallel fsdp --steps 20 \
  --out "$OUT/train-1b-fsdp"
# The levers (issue 22), each against train-1b-fsdp above (fused AdamW is already on there, a GPU's default):
# tgs and peak memory of each, and the first losses, which must match.
step train-1b-unfused 120 "${CB[@]}" train --nproc "$NP" --preset llama-1b --dtype bfloat16 --parallel fsdp --steps 20 \
  --no-fused-adamw --out "$OUT/train-1b-unfused"
step train-1b-selective 120 "${CB[@]}" train --nproc "$NP" --preset llama-1b --dtype bfloat16 --parallel fsdp \
  --steps 20 --activation-checkpointing selective --out "$OUT/train-1b-selective"
step train-1b-full-ac 120 "${CB[@]}" train --nproc "$NP" --preset llama-1b --dtype bfloat16 --parallel fsdp \
  --steps 20 --activation-checkpointing --out "$OUT/train-1b-full-ac"
step train-1b-gathered 120 "${CB[@]}" train --nproc "$NP" --preset llama-1b --dtype bfloat16 --parallel fsdp \
  --steps 20 --no-reshard-after-forward --out "$OUT/train-1b-gathered"
step train-1b-compile 240 "${CB[@]}" train --nproc "$NP" --preset llama-1b --dtype bfloat16 --parallel fsdp \
  --steps 20 --compile --out "$OUT/train-1b-compile"
# llama-8b set up on meta and sharded (one GPU holds all of its state: 16 B x 8.03e9 = 128 GB of 141 GB),
# a few short steps: proves the set-up never holds the whole model before sharding.
step train-8b-fsdp 300 "${CB[@]}" train --nproc "$NP" --preset llama-8b --dtype bfloat16 --parallel fsdp --steps 4 \
  --warmup-steps 1 --seq-len 1024 --global-batch "$NP" --micro-batch 1 --activation-checkpointing --out "$OUT/train-8b-fsdp"
step run-quick 180 "${CB[@]}" run --quick --out "$OUT/run-quick"
# The node checks' GPU paths one by one (issue 32), each printed: the counters through NVML for every GPU NVML sees
# (ECC, remaps, PCIe replays and link, recent Xids by their severity) and what the node rules say of them; pinned
# host-device copies of each GPU alone, their spread and share of the PCIe link, the link's generation read under
# their load; and with several GPUs the copy matrix against NVLink or PCIe.
step counters 60 "$PY" -c '
from clusterbench.nodechecks import node_rules
from clusterbench.hw import counters
gpus = counters.node_gpus(); snap = counters.snapshot(gpus)
print("# gpus:", [(g.label, g.bus_id) for g in gpus], "missing:", snap.missing, "xids:", len(snap.xids))
print("# counters:", {k: v for k, v in snap.counters.items()})
print("# counts:", counters.figures(None, snap))
for f in counters.states(snap): print("# finding:", f.subject, f.what, "|", f.severity, "|", f.action)
for m in node_rules.judge(counters.figures(None, snap), counters.states(snap), node_rules.load()): print("#", m.level, m.line)'
step copies 120 "$PY" -c '
import torch
from clusterbench.nodechecks import measures
from clusterbench.nodechecks.table import NODE_CHECKS
gpus = tuple(torch.device("cuda", i) for i in range(torch.cuda.device_count()))
for d in gpus:
    found = measures.host_device(measures.On(d, torch.cuda.get_device_name(d), 1.0))
    print("# host_device", d, found.counts, [f.what for f in found.findings])
    for c in found.copies: print("#  ", c.subject, c.metric, c.text())
if len(gpus) > 1:
    found = measures.peer_copies(measures.On(gpus[0], "", 4.0, devices=gpus))
    print("# peer_copies", found.figures, [f.what for f in found.findings])
    for c in found.copies: print("#  ", c.subject, c.text())'
# The health check on a GPU node (issues 20, 31, 32): the node checks' table in order, as `check -v` names each:
# NVML's ECC and remap counters, PCIe links and recent Xids judged by the node rules, the bf16 peaks, pinned
# host-device copies, the GPU-to-GPU copy matrix, the numerics vote across the GPUs; exit 0 and one line, or 1 with
# the reason (no drain: no Slurm here).
step check 90 "${CB[@]}" check --gpus "$NGPU" --budget 80 --store off -v
# The burn-in (issue 32): bf16 matmul at full power, the memory test over most of the free HBM, the collectives
# and the bitwise repeat, for two minutes (its quick level), each node's counters read through NVML over it and
# judged by the node rules (burnin counters), then its bench against a bare matmul loop and copy.
step burnin 200 "${CB[@]}" burnin --nproc "$NP" --level quick --out "$OUT/burnin"
step bench-burnin 180 "$PY" bench/bench_burnin.py --seconds 20
if (( NP > 1 )); then  # a bare loop has no busbw to compare at world size 1
  step bench-comm 90 "$PY" bench/bench_comm.py --nproc "$NP" --max-bytes 256M --rounds 3
  step bench-telemetry 120 "$PY" bench/bench_telemetry.py --nproc "$NP" --max-bytes 256M --rounds 3
else
  echo "bench-comm, bench-telemetry skipped: one GPU, no busbw to compare" | tee -a "$SUMMARY"
fi
echo "# done in ${SECONDS}s; details in $OUT/*.log" | tee -a "$SUMMARY"
