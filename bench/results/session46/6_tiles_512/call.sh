#!/usr/bin/env bash
# session 46 call 6: single settings of the (512, several heads) table entry changed from
# 1024's, through MHAR_ROUTING_CONFIG, in the 100M step (which runs below the power cap at
# 8 x 2048, about 350-490 W): phase 2's forward in one warp; its backward adding into sums
# in two; phase 1's forward uncapped as the defaults have it; the fused COEF pass in
# 32-lane pieces; phase 2's backward at 8 programs per SM. One process each, the shipped
# entry first and last.
# run: C=<commit> OUT=$OUT bash bench/results/session46/6_tiles_512/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
step() {  # tag config-json-or-empty
  if [ -n "$2" ]; then echo "{\"512,1\": $2}" > $R/cfg_$1.json; export MHAR_ROUTING_CONFIG=$R/cfg_$1.json
  else unset MHAR_ROUTING_CONFIG; fi
  timeout 90 python3 -m mhar bench step --preset paper-100m --methods baseline,mhar --steps 30 --warmup 3 \
    --out $R --tag 100m_$1 > $R/step_100m_$1.log 2>&1
  echo "rc=$? $1 $2"; grep -h "| paper" $R/step_100m_$1.md | sort -u; rm -f $R/*.png; pack
}
step shipped_1 ""
step fwd_1warp '{"fwd_warps": 1}'
step bwd_sum_2warps '{"bwd_sum_warps": 2}'
step p1fwd_uncapped '{"fwd_split_maxnreg": null, "fwd_split_progs_per_sm": 8, "dot_stages": 3, "fwd_dot_stages": null}'
step grads_32lanes '{"coef_grads_lanes": 32}'
step bwd_8_per_sm '{"bwd_progs_per_sm": 8}'
step shipped_2 ""
