#!/usr/bin/env bash
# Session 61, call 2: torchrun on one GPU (world size 1), bench/multi_gpu.py (Trainer.fit's
# own step times, 3 untimed, 8 timed):
#  d. paper-100m, 8 x 2048: the new defaults, one process and DDP (baseline, mhar);
#  e. paper-100m: DDP with the old multi-process defaults (compile off, torch's AdamW);
#  f. paper-350m, 16 x 1024: FSDP2 with the new defaults (regions; torch's fused AdamW on
#     the sharded DTensors);
#  g. paper-350m: FSDP2 with regions and torch's foreach AdamW (call 1's FSDP2 rows),
#     through foreach_fsdp.py.
# run: C=<commit> OUT=$OUT bash bench/results/session61/2_100m_fsdp/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src OMP_NUM_THREADS=8
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=bench/results/session61/2_100m_fsdp
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $R/gpu.csv
M100="--preset paper-100m --batch 8 --seq 2048 --warmup 3 --steps 8"
M350="--preset paper-350m --batch 16 --seq 1024 --warmup 3 --steps 8"
job() {  # name, seconds, script, then its arguments
  local name=$1 limit=$2 script=$3; shift 3
  local left=$((585 - SECONDS)); [ $limit -gt $left ] && limit=$left
  timeout $limit python3 -m torch.distributed.run --standalone --nproc_per_node=1 $script \
    --suite $R/$name "$@" > $R/$name.log 2>&1
  echo "job $name exit $? at ${SECONDS}s"; grep "tokens/s" $R/$name.log; pack
}
job d 240 bench/multi_gpu.py $M100 --methods baseline,mhar --modes none,ddp
job e 120 bench/multi_gpu.py $M100 --methods baseline,mhar --modes ddp compile=off adamw=torch
job f 100 bench/multi_gpu.py $M350 --methods baseline --modes fsdp
job g 100 $D/foreach_fsdp.py $M350 --methods baseline --modes fsdp
for j in d e f g; do python3 bench/multi_gpu.py --table $R/$j/*.json; done | tee $R/tables.md
pack
