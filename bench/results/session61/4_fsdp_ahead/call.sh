#!/usr/bin/env bash
# Session 61, call 4: torchrun on one GPU (world size 1), paper-350m 16 x 1024,
# bench/multi_gpu.py (Trainer.fit's own steps, 3 untimed, 8 timed; each trainer's memory
# released before the next row):
#  j. FSDP2 with its defaults: torch's fused AdamW checked on the device, a step queued ahead;
#  k. FSDP2 with the checks on the host (host_checks.py), nothing queued ahead;
#  i. one process and DDP with cuda_graphs=on (call 3's i again: the peak memory);
#  then the GPU tests of test_adamw_kernel.py and the DDP-with-graphs test.
# run: C=<commit> OUT=$OUT bash bench/results/session61/4_fsdp_ahead/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src OMP_NUM_THREADS=8
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=bench/results/session61/4_fsdp_ahead
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $R/gpu.csv
M350="--preset paper-350m --batch 16 --seq 1024 --warmup 3 --steps 8"
job() {  # name, seconds, script, then its arguments
  local name=$1 limit=$2 script=$3; shift 3
  local left=$((560 - SECONDS)); [ $limit -gt $left ] && limit=$left
  timeout $limit python3 -m torch.distributed.run --standalone --nproc_per_node=1 $script \
    --suite $R/$name "$@" > $R/$name.log 2>&1
  echo "job $name exit $? at ${SECONDS}s"; grep "tokens/s" $R/$name.log; pack
}
job j 100 bench/multi_gpu.py $M350 --methods baseline,mhar --modes fsdp
job k 80 $D/host_checks.py $M350 --methods baseline,mhar --modes fsdp
job i 120 bench/multi_gpu.py $M350 --methods baseline,mhar --modes none,ddp cuda_graphs=on
for j in j k i; do python3 bench/multi_gpu.py --table $R/$j/*.json; done | tee $R/tables.md
pack
LEFT=$((555 - SECONDS))
timeout $LEFT python3 -m pytest -q -p no:cacheprovider -rfEs tests/core/test_adamw_kernel.py \
  "tests/train/test_cuda_graphs.py::test_ddp_with_cuda_graphs_follows_one_process" > $R/tests.log 2>&1
echo "tests exit $? at ${SECONDS}s"; tail -3 $R/tests.log
pack
