#!/usr/bin/env bash
# session 44 call 3: the grid fix on the GPU. Call 2's 100M run at 64 x 2048 (the trainer
# preset's microbatch, 131,072 tokens) failed to launch `_fwd_kernel` (its tokens were on
# the grid's second axis, which stops at 65,535). Here: the GPU routing tests around it,
# the 100M step at 64 x 2048, and 350M at its default microbatch to see the step unchanged.
# run: C=<commit> OUT=$OUT bash bench/results/session44/3_grid_fix/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/routing/test_triton_cuda.py \
  -k "more_tokens or route_fp32 or partial_fp32 or two_phase or fused_phase_two or key_scales" > $R/gpu_tests.log 2>&1
tail -3 $R/gpu_tests.log; pack
step() {  # tag preset methods steps limit [bench args]
  timeout $5 python3 -m mhar bench step --preset $2 --methods $3 --steps $4 --warmup 3 \
    --out $R --tag $1 "${@:6}" > $R/step_$1.log 2>&1
  grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 100m_b64 paper-100m baseline,mhar 20 160 --batch 64
step 350m_b16 paper-350m baseline,mhar 30 170
