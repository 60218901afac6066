#!/usr/bin/env bash
# session 46 call 3: 1024's phase-1 table entry at 512 (two-warp per-query kernels, the
# one-warp sum backward, phase 1's forward in 2 stages capped at 168 registers with 12
# programs per SM, the fused COEF pass), through MHAR_ROUTING_CONFIG, against the
# defaults: alternating processes at the bench's microbatch, then one each at 64 x 2048.
# run: C=<commit> OUT=$OUT bash bench/results/session46/3_as_1024/call.sh
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
echo '{"512,1": {"fwd_warps": 2, "bwd_warps": 2, "bwd_sum_warps": 1, "dot_stages": 2, "fwd_dot_stages": 2,
 "fwd_split_maxnreg": 168, "fwd_split_progs_per_sm": 12, "coef_grads": true}}' > $R/cfg_as_1024.json
A="env MHAR_ROUTING_CONFIG=$R/cfg_as_1024.json"
$A bash -c true  # (checks env is callable)
MHAR_ROUTING_CONFIG=$R/cfg_as_1024.json step 100m_as_1024_1 paper-100m baseline,mhar 30 100
step 100m_auto_1 paper-100m baseline,mhar 30 100
MHAR_ROUTING_CONFIG=$R/cfg_as_1024.json step 100m_as_1024_2 paper-100m baseline,mhar 30 100
step 100m_auto_2 paper-100m baseline,mhar 30 100
MHAR_ROUTING_CONFIG=$R/cfg_as_1024.json step 100m_as_1024_b64 paper-100m baseline,mhar 10 110 --batch global
step 100m_auto_b64 paper-100m baseline,mhar 10 110 --batch global
