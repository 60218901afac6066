#!/usr/bin/env bash
# Session 52, staged for a later session with a GPU (not run: no device was lent in
# session 52). The op now sizes every persistent launch from its compiled kernel after
# the first launch (mhar.routing.occupancy; docs/kernels.md, "Whole waves at run time").
# On the H200 with triton 3.6 it should change no grid: the offline audit found every
# config already asking for whole waves. This call checks that:
# 1. the GPU test test_persistent_grids_run_whole_waves (every launch tells its
#    registers; the second step's gradients, on grids sized from them, match the first's;
#    on sm_90 with triton 3.6 no launch resized), printing each launch's asked / held /
#    launched programs per SM;
# 2. the offline audit's numbers against the GPU's (the same table, offline, on the GPU's
#    triton: compile_sm90 --kernels residency);
# 3. the 100M step, baseline and mhar, at this commit (session 49's call 4 at df72c10:
#    32.2 ms, 0.896; the graphed step hides the few microseconds a launch the keys cost).
# run: C=<commit> OUT=$OUT bash bench/results/session52/next_1_whole_waves/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 240 python3 -m pytest -q -s tests/routing/test_triton_cuda.py -k whole_waves -p no:cacheprovider \
  > $R/gpu_test.log 2>&1; echo "gpu test exit $?"; tail -3 $R/gpu_test.log; grep -A 12 "asked per SM" $R/gpu_test.log; pack
timeout 120 python3 bench/compile_sm90.py --kernels residency --shapes 512/8,1024/8 > $R/residency.md 2>&1
tail -12 $R/residency.md; pack
timeout 150 python3 -m mhar bench step --preset paper-100m --methods baseline,mhar --steps 30 --warmup 3 \
  --out $R --tag 100m > $R/step_100m.log 2>&1
grep -h "| paper" $R/step_100m.md | sort -u; rm -f $R/*.png; pack
