#!/usr/bin/env bash
# Multi-GPU scaling at paper-350m: tokens/s of the trainer's step on 1 GPU (plain
# Trainer) and on 2 GPUs (torchrun: DDP, then FSDP2), for baseline and mhar.
# Random tokens, the paper's 350M micro-batch (16 x 1024) per GPU, bf16 autocast, the
# trainer's defaults (compile, AdamW, CUDA graphs: see the table's column; before
# session 61 compile was off here), Trainer.fit's own step times, 3 untimed + 8 timed
# steps. One torchrun job measures
# everything (processes start and kernels compile once), in this order:
# baseline/mhar on 1 GPU, baseline/mhar DDP x2, baseline/mhar FSDP2 x2.
# Results are written as they come: $OUT/<method>_<parallel><gpus>.json and
# $OUT/log.txt; last $OUT/table.md, which is printed.
# Usage (repository root, a machine with >= 2 GPUs):
#   OUT=bench/results/multi_gpu_local bash bench/multi_gpu.sh
# SUITE_TIMEOUT_S (default 380) caps the job; what finished before is kept. MODES (default
# none,ddp,fsdp) and BENCH_ARGS (preset, batch, steps) can be changed. A second job then
# runs DDP with cuda_graphs=on into $OUT/ddp_graphs (GRAPHS_TIMEOUT_S, default 200; 0 skips
# it); the table has both.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # NVLink multicast stays off
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-bench/results/multi_gpu_local}
PY=${PYTHON:-python3}
NGPU=${NGPU:-2}
SUITE_TIMEOUT_S=${SUITE_TIMEOUT_S:-380}
GRAPHS_TIMEOUT_S=${GRAPHS_TIMEOUT_S:-200}  # 0: skip DDP with cuda_graphs=on
MODES=${MODES:-none,ddp,fsdp}  # MODES=none,ddp: skip FSDP2 when device time is short
ARGS=${BENCH_ARGS:-"--preset paper-350m --batch 16 --seq 1024 --warmup 3 --steps 8"}
export MHAR_COMMIT=${MHAR_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
mkdir -p "$OUT"
LOG="$OUT/log.txt"
START=$(date +%s)

{
  echo "# bench/multi_gpu.sh  commit $MHAR_COMMIT  $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# torchrun --standalone --nproc_per_node=$NGPU bench/multi_gpu.py --suite $OUT --methods baseline,mhar --modes $MODES $ARGS"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>&1
  nvidia-smi topo -m 2>&1 | head -4
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count(), 'nccl', torch.cuda.nccl.version())" 2>&1
} | tee -a "$LOG"

timeout "$SUITE_TIMEOUT_S" $PY -m torch.distributed.run --standalone --nproc_per_node="$NGPU" bench/multi_gpu.py \
  --suite "$OUT" --methods baseline,mhar --modes "$MODES" $ARGS 2>&1 | grep -v '^W.*torch/distributed/run.py' | tee -a "$LOG"
echo "rc=${PIPESTATUS[0]} after $(( $(date +%s) - START ))s" | tee -a "$LOG"

# DDP again with its steps replayed from CUDA graphs (opt in: cuda_graphs=on), into its own folder
if [ "$GRAPHS_TIMEOUT_S" -gt 0 ]; then
  echo "# the same, --modes ddp cuda_graphs=on, into $OUT/ddp_graphs" | tee -a "$LOG"
  timeout "$GRAPHS_TIMEOUT_S" $PY -m torch.distributed.run --standalone --nproc_per_node="$NGPU" bench/multi_gpu.py \
    --suite "$OUT/ddp_graphs" --methods baseline,mhar --modes ddp $ARGS cuda_graphs=on 2>&1 \
    | grep -v '^W.*torch/distributed/run.py' | tee -a "$LOG"
  echo "rc=${PIPESTATUS[0]} after $(( $(date +%s) - START ))s" | tee -a "$LOG"
fi

$PY bench/multi_gpu.py --table "$OUT"/*.json $(ls "$OUT"/ddp_graphs/*.json 2>/dev/null) > "$OUT/table.md" 2>&1
echo; cat "$OUT/table.md"
