#!/usr/bin/env bash
# session 34 call 2: two-phase block MHAR's phase-1 kernels. Call 1's profile: at 350M each
# block's product kernels take the same time whatever its source count (1 to 8): forward
# about 235 us, COEF pass 290-310, gather 345-380, 7.2 ms a step against about 1.7 at
# their bytes; they pad a token's sources to a block of 16. Here the per-query kernels
# instead, through MHAR_ROUTING_CONFIG, one process each (baseline and
# mhar-block@two-phase, 30 timed steps):
#   a: as shipped; b: fwd_dot off; c: fwd_dot and coef_dot off; d: c + bwd_twopass off.
# run: C=<commit> OUT=$OUT bash bench/results/session34/2_block_phase1_kernels/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
run() {  # tag, config (MHAR_ROUTING_CONFIG names a JSON file)
  echo "$2" > $R/config_$1.json
  MHAR_ROUTING_CONFIG=$R/config_$1.json timeout 150 python3 -m mhar bench step --preset paper-350m \
    --methods baseline,mhar-block@two-phase --steps 30 --warmup 3 --out $R --tag 350m_$1 > $R/step_$1.log 2>&1
  echo "$1 $2"; grep -h "| paper" $R/step_350m_$1.md; rm -f $R/*.png; pack
}
run a '{}'
run b '{"*": {"fwd_dot": false}}'
run c '{"*": {"fwd_dot": false, "coef_dot": false}}'
run d '{"*": {"fwd_dot": false, "coef_dot": false, "bwd_twopass": false}}'
