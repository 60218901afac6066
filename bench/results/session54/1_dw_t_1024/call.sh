#!/usr/bin/env bash
# Session 53, staged for a later session (not run: the device time ran out). The fused
# COEF pass at 1024 (350M) with d(q*g) held transposed, from a second, transposed load of
# the source tiles (config "coef_grads_dw_t", the kernel's DW_T). Offline on triton 3.6
# (../offline/fused_pass_1024_dw_t.md) it compiles capped at 168 in one stage with 16-lane
# pieces to no stack, so 12 programs fit an SM instead of 8; as built, the cap spills 120
# bytes. At 512, 12 programs an SM took 17-22% off the pass (call 2). 1. the GPU test of
# the form (gradients against the two passes' and fp64); 2. one phase-1 read at 1024 with
# 9 / 25 / 41 sources over sweep_1024.json; 3. when the best is at most 0.97 of as built in
# routing-kernel time, the 350M step with it against as built, processes alternating.
# run: C=<commit> OUT=$OUT bash bench/results/session53/next_2_dw_t_1024/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
D=bench/results/session53/next_2_dw_t_1024
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 120 python3 -m pytest -q tests/routing/test_triton_cuda.py -k "test_coef_grads and 1024" -p no:cacheprovider \
  > $R/gpu_tests.log 2>&1; echo "gpu tests exit $?"; tail -2 $R/gpu_tests.log; pack
timeout 150 python3 bench/phase1_call.py --direct-rows --d 1024 --n 9,25,41 --queries 8 --heads 8 --iters 20 \
  --sweep $D/sweep_1024.json > $R/sweep_1024.md 2>&1; grep "^|" $R/sweep_1024.md | grep -v -- "---"; pack
step() {  # tag [config]
  timeout 110 env ${2:+MHAR_ROUTING_CONFIG=$2} python3 -m mhar bench step --preset paper-350m \
    --methods baseline,mhar --steps 30 --warmup 3 --out $R --tag $1 > $R/step_$1.log 2>&1
  grep -h "| paper" $R/step_$1.md | grep -v "| >=\|| <=" | sort -u; rm -f $R/*.png; pack
}
if python3 bench/pick_config.py $R/sweep_1024.md $D/sweep_1024.json "1024,1" 0.97 $R/pick_1024.json; then
  cat $R/pick_1024.json; step 350m_pick1 $R/pick_1024.json; step 350m_built; step 350m_pick2 $R/pick_1024.json
fi
