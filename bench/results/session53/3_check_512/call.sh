#!/usr/bin/env bash
# Session 53, call 3: the 512 config from call 2 (the fused COEF pass 12 per SM, 32-lane
# pieces, capped at 168) as built. 1. the GPU tests of the fused pass at 512 (its gradients
# against the two passes' and fp64) and of the whole-wave sizing; 2. every bar at this
# commit, as session 49's call 4: `mhar bench step`, all five methods, each preset in one
# process, 30 timed steps, graphed; the 1B preset gets what is left of the call's 590 s.
# (Call 2 already timed this 512 entry against the old one in alternating processes.)
# run: C=<commit> OUT=$OUT bash bench/results/session53/3_check_512/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 90 python3 -m pytest -q -s tests/routing/test_triton_cuda.py -k "test_coef_grads and 512 or whole_waves" \
  -p no:cacheprovider > $R/gpu_tests.log 2>&1; echo "gpu tests exit $?"; tail -2 $R/gpu_tests.log; pack
step() {  # preset limit
  timeout $2 python3 -m mhar bench step --preset paper-$1 --methods baseline,hyper,attnres,mhar,mhar-block \
    --steps 30 --warmup 3 --out $R --tag $1 > $R/step_$1.log 2>&1
  echo "rc=$? $1 at ${SECONDS}s"; grep -h "| paper" $R/step_$1.md | grep -v "| >=\|| <=" | sort -u; rm -f $R/*.png; pack
}
step 100m 120
step 350m 170
step 1b $((590 - SECONDS))
