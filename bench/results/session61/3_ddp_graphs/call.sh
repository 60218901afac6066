#!/usr/bin/env bash
# Session 61, call 3: DDP with CUDA graphs (no DDP wrapper; the graphed step's flat
# gradients all-reduced after the step), on one GPU (torchrun, world size 1):
#  1. the new GPU tests (flat-gradient graphs; DDP with graphs against one process);
#  2. bench/multi_gpu.py, Trainer.fit's own steps (3 untimed, 8 timed):
#     h. paper-100m 8 x 2048, baseline and mhar: one process, and DDP with cuda_graphs=on;
#     d. paper-100m: DDP with its defaults (regions, Triton AdamW, no graphs), as call 2's d;
#     i. paper-350m 16 x 1024: one process, and DDP with cuda_graphs=on;
#  3. test_cuda_graphs.py, test_adamw_kernel.py and test_activation_checkpointing.py in
#     parallel shards with the time left.
# run: C=<commit> OUT=$OUT bash bench/results/session61/3_ddp_graphs/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src OMP_NUM_THREADS=8
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $R/gpu.csv
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfEs tests/train/test_cuda_graphs.py \
  -k "flat_gradients or ddp_with_cuda_graphs or errors" > $R/new_tests.log 2>&1
echo "new tests exit $? at ${SECONDS}s"; tail -3 $R/new_tests.log; pack
M100="--preset paper-100m --batch 8 --seq 2048 --warmup 3 --steps 8"
M350="--preset paper-350m --batch 16 --seq 1024 --warmup 3 --steps 8"
job() {  # name, seconds, then bench/multi_gpu.py arguments
  local name=$1 limit=$2; shift 2
  local left=$((585 - SECONDS)); [ $limit -gt $left ] && limit=$left
  timeout $limit python3 -m torch.distributed.run --standalone --nproc_per_node=1 bench/multi_gpu.py \
    --suite $R/$name "$@" > $R/$name.log 2>&1
  echo "job $name exit $? at ${SECONDS}s"; grep "tokens/s" $R/$name.log; pack
}
job h 150 $M100 --methods baseline,mhar --modes none,ddp cuda_graphs=on
job d 80 $M100 --methods baseline,mhar --modes ddp
job i 150 $M350 --methods baseline,mhar --modes none,ddp cuda_graphs=on
for j in h d i; do python3 bench/multi_gpu.py --table $R/$j/*.json; done | tee $R/tables.md
pack
LEFT=$((580 - SECONDS))
if [ $LEFT -gt 90 ]; then
  FILES="tests/train/test_cuda_graphs.py tests/core/test_adamw_kernel.py tests/train/test_activation_checkpointing.py" \
    WAVE_S=$((LEFT - 10)) END_S=$((LEFT - 5)) SHARDS=6 OUT=$R/t bash bench/results/session59/1_gpu_tests/call.sh > $R/tests.log 2>&1
  tail -8 $R/tests.log
fi
pack
