#!/usr/bin/env bash
# session 46 call 2: 'auto' two-phase for full routing at d = 512 (the change); block
# routing at 512 both ways; the phase-1 settings the 1024 table uses (the fused COEF pass,
# coef_grads; then 1024's whole entry) at 512, through MHAR_ROUTING_CONFIG, against the
# defaults in processes beside them.
# run: C=<commit> OUT=$OUT bash bench/results/session46/2_auto_512/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
step() {  # tag preset methods steps limit [bench args]
  timeout $5 python3 -m mhar bench step --preset $2 --methods $3 --steps $4 --warmup 3 \
    --out $R --tag $1 "${@:6}" > $R/step_$1.log 2>&1
  echo "rc=$? $1"; grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
echo '{"512,1": {"coef_grads": true}}' > $R/cfg_coef_grads.json
echo '{"512,1": {"fwd_warps": 2, "bwd_warps": 2, "bwd_sum_warps": 1, "dot_stages": 2, "fwd_dot_stages": 2,
 "fwd_split_maxnreg": 168, "fwd_split_progs_per_sm": 12, "coef_grads": true}}' > $R/cfg_as_1024.json
step 100m_auto paper-100m baseline,mhar,mhar@one-pass,attnres,mhar-block,mhar-block@two-phase 20 240
MHAR_ROUTING_CONFIG=$R/cfg_coef_grads.json step 100m_coef_grads paper-100m baseline,mhar 20 110
step 100m_auto2 paper-100m baseline,mhar 20 100
MHAR_ROUTING_CONFIG=$R/cfg_as_1024.json step 100m_as_1024 paper-100m baseline,mhar 20 110
