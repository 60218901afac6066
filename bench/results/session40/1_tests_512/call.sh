#!/usr/bin/env bash
# session 40 call 1: (1) the GPU sink and COEF-pass tests at HEAD (after 97f6204's
# SinkSpan._entries refactor); (2) phase 1 at 512 with 8 heads (100M), where coef_grads
# (the sources' gradients formed in the COEF pass) is off: the fused pass and its
# settings against the two passes on one read as training takes it; (3) the 100M step
# with coef_grads on at 512 and as built, one process each, in both orders.
# run: C=<commit> OUT=$OUT bash bench/results/session40/1_tests_512/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
D=bench/results/session40/1_tests_512
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/routing/test_triton_cuda.py \
  -k "test_gradient_sink or test_coef_grads" > $R/tests.log 2>&1
tail -n 8 $R/tests.log | cut -c1-300; pack
timeout 90 python3 bench/phase1_call.py --direct-rows --d 512 --n 9,17 --queries 8 --heads 8 --iters 10 \
  --sweep $D/sweep_512.json > $R/sweep_512.md 2>&1; grep "^|" $R/sweep_512.md | grep -v -- "---"; tail -n 2 $R/sweep_512.md; pack
step() {  # preset, tag, config, methods, limit
  MHAR_ROUTING_CONFIG=$3 timeout $5 python3 -m mhar bench step --preset paper-$1 --methods $4 --steps 30 \
    --warmup 3 --out $R --tag $1_$2 > $R/step_$1_$2.log 2>&1
  echo "$1 $2"; grep -h "| paper" $R/step_$1_$2.md | sort -u; tail -n 2 $R/step_$1_$2.log | cut -c1-300; rm -f $R/*.png; pack
}
step 100m grad_a $D/grad_512.json baseline,mhar 95
step 100m built_a "" baseline,mhar 95
step 100m built_b "" baseline,mhar 95
step 100m grad_b $D/grad_512.json baseline,mhar 95
