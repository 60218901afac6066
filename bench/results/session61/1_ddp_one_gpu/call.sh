#!/usr/bin/env bash
# Session 61, call 1: the trainer under torchrun on one GPU (world size 1), paper-350m,
# 16 x 1024, Trainer.fit's own step times (3 untimed, 8 timed), bench/multi_gpu.py:
#  a. the new defaults: none (one process: regions, Triton AdamW, CUDA graphs), DDP and
#     FSDP2 (regions on CUDA; DDP with the Triton AdamW, so fit queues a step ahead);
#  b. the old multi-process defaults: compile off, torch's AdamW (DDP, FSDP2);
#  c. DDP with regions and torch's AdamW (nothing queued ahead).
# run: C=<commit> OUT=$OUT bash bench/results/session61/1_ddp_one_gpu/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src OMP_NUM_THREADS=8
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $R/gpu.csv
ARGS="--preset paper-350m --batch 16 --seq 1024 --warmup 3 --steps 8"
job() {  # name, seconds, then bench/multi_gpu.py arguments
  local name=$1 limit=$2; shift 2
  local left=$((585 - SECONDS)); [ $limit -gt $left ] && limit=$left
  timeout $limit python3 -m torch.distributed.run --standalone --nproc_per_node=1 bench/multi_gpu.py \
    --suite $R/$name $ARGS "$@" > $R/$name.log 2>&1
  echo "job $name exit $? at ${SECONDS}s"; grep "tokens/s" $R/$name.log; pack
}
job a 300 --methods baseline,mhar --modes none,ddp,fsdp
job b 130 --methods baseline,mhar --modes ddp,fsdp compile=off adamw=torch
job c 100 --methods baseline --modes ddp adamw=torch
for j in a b c; do python3 bench/multi_gpu.py --table $R/$j/*.json; done | tee $R/tables.md
pack
