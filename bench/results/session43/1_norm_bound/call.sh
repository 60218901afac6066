#!/usr/bin/env bash
# session 43 call 1: how much of MHAR's 350M step the sublayers' pre-norms take, as an
# upper bound for fusing them into the routing kernels: mhar against mhar-nonorm (the
# same model with each sublayer's norm an identity; bound.py), in one process, twice in
# both orders; then session 42's untried "bwd sum 2 warps, 8 per SM" in the step.
# run: C=<commit> OUT=$OUT bash bench/results/session43/1_norm_bound/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
D=bench/results/session43/1_norm_bound
step() {  # tag methods [config]
  timeout 200 env ${3:+MHAR_ROUTING_CONFIG=$3} python3 $D/bound.py --preset paper-350m --methods $2 \
    --steps 30 --warmup 3 --out $R --tag $1 > $R/step_$1.log 2>&1
  grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 350m_a baseline,mhar,mhar-nonorm
step 350m_b baseline,mhar-nonorm,mhar
echo '{"1024,1": {"bwd_sum_warps": 2, "bwd_progs_per_sm": 8}}' > $R/bwd2.json
step 350m_bwd2 baseline,mhar $R/bwd2.json
