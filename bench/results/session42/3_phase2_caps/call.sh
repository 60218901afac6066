#!/usr/bin/env bash
# session 42 call 3: phase 2's one-query kernels at 1024 with 8 heads under register caps,
# for more programs per SM (call 2's ncu: `_fwd_kernel` 89 registers, 10 two-warp programs
# per SM, 68-69% of DRAM peak; `_bwd_kernel` adding into sums 232 registers, 8 one-warp
# programs, 72-74%). Offline (triton 3.6): the forward capped at 80 spills nothing, at 64
# 56 bytes; the backward capped at 168 spills 8 bytes (12 per SM). The whole step's
# routing (bench/routing.py --step-only, 1024/49, kernel times from the profiler), then
# the 350M step with the picks (pick.py) against as built: pick, as built, pick.
# run: C=<commit> OUT=$OUT bash bench/results/session42/3_phase2_caps/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
D=bench/results/session42/3_phase2_caps
timeout 240 python3 bench/routing.py --step-only --shapes 1024/24 --heads 8 --no-one-pass --no-peers \
  --phase1 "$(cat $D/sweep.json)" --out $R/sweep_1024.json > $R/sweep_1024.log 2>&1
grep "whole step" $R/sweep_1024.log; pack
python3 $D/pick.py $R/sweep_1024.json $R/pick.json | tee $R/pick.txt; pack
step() {  # tag config
  timeout 130 env ${2:+MHAR_ROUTING_CONFIG=$2} python3 -m mhar bench step --preset paper-350m --methods baseline,mhar \
    --steps 30 --warmup 3 --out $R --tag $1 > $R/step_$1.log 2>&1
  grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
grep -q '"1024,1": {}' $R/pick.json && exit 0  # nothing faster: no step
step 350m_pick1 $R/pick.json; step 350m_built ""; step 350m_pick2 $R/pick.json
