#!/usr/bin/env bash
# session 38 call 3 (call 2 passed JSON where a file is wanted): phase 1's backward with the sources' gradients formed in the COEF pass
# (op's coef_grads, on by default; the key norm's x term deferred to phase 2 or the sink).
# The 350M step's kernels with it on (profile), then the step with it on (as built), off, and on with the split COEF
# pass in 2 warps, 4 programs per SM at 1024 (the GRAD kernel spills at one warp offline).
# run: C=<commit> OUT=$OUT bash bench/results/session38/2_coef_grads/call.sh
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
  echo "$1 $2"; grep -h "| paper" $R/step_$1_$2.md; tail -n 3 $R/step_$1_$2.log | cut -c1-300; rm -f $R/*.png; pack
}
D=bench/results/session38/2_coef_grads
step 350m off $D/off.json baseline,mhar 130
step 350m w2 $D/w2.json baseline,mhar 130
