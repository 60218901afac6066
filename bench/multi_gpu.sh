#!/usr/bin/env bash
# Multi-GPU scaling at paper-350m: tokens/s of the trainer's step on 1 GPU (plain
# Trainer) and on 2 GPUs (torchrun, DDP then FSDP2), for baseline and mhar.
# Random tokens, the paper's 350M micro-batch (16 x 1024) per GPU, bf16 autocast,
# torch.compile off, 3 untimed + 8 timed steps. Results are written as they come:
#   $OUT/<method>_<parallel><gpus>.json, $OUT/log.txt, and last $OUT/table.md (printed).
# Usage (repository root, a machine with >= 2 GPUs):
#   OUT=bench/results/multi_gpu_local bash bench/multi_gpu.sh
# BUDGET_S (default 330): no new run starts after this many seconds; each run is
# also capped by RUN_TIMEOUT_S (default 150). FSDP2 runs come last and are skipped
# when the budget is spent.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # NVLink multicast stays off
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-bench/results/multi_gpu_local}
PY=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-330}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-150}
NGPU=${NGPU:-2}
ARGS=${BENCH_ARGS:-"--preset paper-350m --batch 16 --seq 1024 --warmup 3 --steps 8"}
export MHAR_COMMIT=${MHAR_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
mkdir -p "$OUT"
LOG="$OUT/log.txt"
START=$(date +%s)

{
  echo "# bench/multi_gpu.sh  commit $MHAR_COMMIT  $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>&1
  nvidia-smi topo -m 2>&1 | head -5
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count(), 'nccl', torch.cuda.nccl.version())" 2>&1
} | tee -a "$LOG"

bench() {  # bench METHOD PARALLEL NPROC
  local method=$1 parallel=$2 n=$3 elapsed
  elapsed=$(( $(date +%s) - START ))
  if (( elapsed > BUDGET_S )); then
    echo "SKIP $method $parallel x$n: ${elapsed}s elapsed > BUDGET_S=$BUDGET_S" | tee -a "$LOG"; return
  fi
  local json="$OUT/${method}_${parallel}${n}.json"
  echo "== $method $parallel x$n (t=${elapsed}s)" | tee -a "$LOG"
  if [[ $n == 1 ]]; then
    timeout "$RUN_TIMEOUT_S" $PY bench/multi_gpu.py --method "$method" --parallel "$parallel" $ARGS --json "$json" 2>&1 | tee -a "$LOG"
  else
    timeout "$RUN_TIMEOUT_S" $PY -m torch.distributed.run --standalone --nproc_per_node="$n" bench/multi_gpu.py \
      --method "$method" --parallel "$parallel" $ARGS --json "$json" 2>&1 | tee -a "$LOG"
  fi
  echo "rc=${PIPESTATUS[0]}" | tee -a "$LOG"
}

for method in baseline mhar; do
  bench "$method" none 1
  bench "$method" ddp "$NGPU"
done
for method in baseline mhar; do
  bench "$method" fsdp "$NGPU"
done

$PY bench/multi_gpu.py --table "$OUT"/*.json > "$OUT/table.md" 2>&1
echo; echo "total $(( $(date +%s) - START ))s"; cat "$OUT/table.md"
