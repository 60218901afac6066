#!/usr/bin/env bash
# session 48 call 2: the baseline with Inductor's mix-order reduction settings (see
# with_inductor.py): the default (1,024 partial rows at 16,384 tokens), partial rows of
# 64 and 128 tokens, and mix-order reduction off; 100M and 350M, one process a row,
# alternating with the default.
# run: C=<commit> OUT=$OUT bash bench/results/session48/2_mix_order/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
D=bench/results/session48/2_mix_order
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
step() {  # tag setting preset methods steps limit
  timeout $6 python3 $D/with_inductor.py $2 -- bench step --preset $3 --methods $4 --steps $5 --warmup 3 \
    --out $R --tag $1 > $R/step_$1.log 2>&1
  echo "rc=$? $1 $2"; grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
timeout 120 python3 $D/show_code.py > $R/show_code.log 2>&1; echo "rc=$? show_code"; cat $R/show_code.log | tail -20
step 100m_a default paper-100m baseline 30 120
step 100m_s64 split=64 paper-100m baseline 30 120
step 100m_s128 split=128 paper-100m baseline 30 120
step 100m_off off paper-100m baseline 30 120
step 100m_b default paper-100m baseline 30 120
step 350m_a default paper-350m baseline 10 120
step 350m_s128 split=128 paper-350m baseline 10 120
step 350m_s64 split=64 paper-350m baseline 10 120
step 350m_b default paper-350m baseline 10 120
