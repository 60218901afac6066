#!/usr/bin/env bash
# session 37 call 5: phase 1's new per-width settings (calls 1-4: the gather's register
# caps by tokens a program, the COEF pass at 2 tokens a program, at 1024 with 8 heads
# also the split forward's cap, programs and stages and the COEF pass's 2 stages) in the
# 1B step: baseline, mhar and mhar-block as built and with session 36's settings
# (../session36.json), one process each, alternating.
# run: C=<commit> OUT=$OUT bash bench/results/session37/5_1b/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
step() {  # preset, tag, config, methods, limit
  MHAR_ROUTING_CONFIG=$3 timeout $5 python3 -m mhar bench step --preset paper-$1 --methods $4 --steps 30 \
    --warmup 3 --out $R --tag $1_$2 > $R/step_$1_$2.log 2>&1
  echo "$1 $2"; grep -h "| paper" $R/step_$1_$2.md; rm -f $R/*.png; pack
}
step 1b built "" baseline,mhar,mhar-block 270
step 1b session36 bench/results/session37/session36.json baseline,mhar,mhar-block 270
