#!/usr/bin/env bash
# session 38 call 4: coef_grads, second form (call 3's fused pass took 9.1 ms a step
# against 8.4 for the COEF pass and the gather apart): the running sums enter as a product
# (I prev, copied ahead by the pipeliner), the deferred terms are stored or added without a
# load, and part A's gradients are formed in pieces of 64 lanes (coef_grads_lanes). The
# 350M mhar step's kernels (profile), then the step with it on, off and with 128 lanes.
# run: C=<commit> OUT=$OUT bash bench/results/session38/4_coef_grads_v2/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 150 python3 bench/profile_step.py --preset paper-350m --methods mhar --out $R > $R/profile_350m.log 2>&1
grep -A 12 "kernel ms per step by kind" $R/profile_350m.log; pack
step() {  # preset, tag, config, methods, limit
  MHAR_ROUTING_CONFIG=$3 timeout $5 python3 -m mhar bench step --preset paper-$1 --methods $4 --steps 30 \
    --warmup 3 --out $R --tag $1_$2 > $R/step_$1_$2.log 2>&1
  echo "$1 $2"; grep -h "| paper" $R/step_$1_$2.md | sort -u; tail -n 2 $R/step_$1_$2.log | cut -c1-300; rm -f $R/*.png; pack
}
step 350m built "" baseline,mhar 130
step 350m off bench/results/session38/2_coef_grads/off.json baseline,mhar 130
step 350m gl128 bench/results/session38/4_coef_grads_v2/gl128.json baseline,mhar 130
