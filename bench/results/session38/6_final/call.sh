#!/usr/bin/env bash
# session 38 call 6: coef_grads on at 1024 only (call 5: it loses at 1280). GPU tests of
# the fused pass and the sink, then the 350M step with it off and as built, in the
# reverse order of call 4, one process each.
# run: C=<commit> OUT=$OUT bash bench/results/session38/6_final/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/routing/test_triton_cuda.py \
  -k "test_coef_grads or test_gradient_sink or test_merge_hands_key_scales_on" > $R/tests.log 2>&1
tail -n 15 $R/tests.log | cut -c1-300; pack
step() {  # preset, tag, config, methods, limit
  MHAR_ROUTING_CONFIG=$3 timeout $5 python3 -m mhar bench step --preset paper-$1 --methods $4 --steps 30 \
    --warmup 3 --out $R --tag $1_$2 > $R/step_$1_$2.log 2>&1
  echo "$1 $2"; grep -h "| paper" $R/step_$1_$2.md | sort -u; tail -n 2 $R/step_$1_$2.log | cut -c1-300; rm -f $R/*.png; pack
}
step 350m off bench/results/session38/2_coef_grads/off.json baseline,mhar 130
step 350m built "" baseline,mhar 130
