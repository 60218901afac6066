#!/usr/bin/env bash
# session 40 call 2: phase 2's one-query kernels (`_fwd_kernel`, `_bwd_kernel` adding into
# the sink's running sums) at 1024 with 8 heads, tokens per tile, warps, programs per SM
# and prefetch, in the whole step's routing (bench/routing.py --step-only, 1024/49, two-phase
# in chunks of 8, kernel times from the profiler); then the 350M step with the picks
# (pick.py) against as built, one process each, in both orders.
# run: C=<commit> OUT=$OUT bash bench/results/session40/2_phase2_tiles/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
D=bench/results/session40/2_phase2_tiles
timeout 270 python3 bench/routing.py --step-only --shapes 1024/24 --heads 8 --no-one-pass --no-peers \
  --phase1 "$(cat $D/sweep.json)" --out $R/sweep_1024.json > $R/sweep_1024.log 2>&1
grep "whole step" $R/sweep_1024.log; pack
python3 $D/pick.py $R/sweep_1024.json $R/pick.json | tee $R/pick.txt; pack
step() {  # preset, tag, config, methods, limit
  MHAR_ROUTING_CONFIG=$3 timeout $5 python3 -m mhar bench step --preset paper-$1 --methods $4 --steps 30 \
    --warmup 3 --out $R --tag $1_$2 > $R/step_$1_$2.log 2>&1
  echo "$1 $2"; grep -h "| paper" $R/step_$1_$2.md | sort -u; tail -n 2 $R/step_$1_$2.log | cut -c1-300; rm -f $R/*.png; pack
}
grep -q '"1024,1": {}' $R/pick.json && exit 0  # nothing faster: no step
step 350m pick_a $R/pick.json baseline,mhar 125
step 350m built_a "" baseline,mhar 125
