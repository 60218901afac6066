#!/usr/bin/env bash
# session 37 call 4: calls 1-3's picks for phase 1 at d 1024 with 8 heads (the gather's
# register caps by tokens at a time, the COEF pass's own token cap and 2 stages, the
# split forward capped at 160 registers, 12 programs per SM, 2 stages) checked at 1B's
# width (1280, 8 heads; 8 queries) and with one head (1024 and 1280); then the 350M step
# as built and with the picks (c1024.json), one process each.
# run: C=<commit> OUT=$OUT bash bench/results/session37/4_widths/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
D=bench/results/session37/4_widths
sweep() {  # tag, d, heads, queries, counts, configs, limit
  timeout $7 python3 bench/phase1_call.py --d $2 --n $5 --queries $4 --heads $3 --iters 20 --sweep $6 \
    > $R/sweep_$1.md 2>&1; grep "^|" $R/sweep_$1.md | grep -v -- "---"; pack
}
sweep 1280h8 1280 8 8 4,8,16,41,73 $D/sweep.json 100
sweep 1024h1 1024 1 6 4,8,16 $D/h1.json 60
sweep 1280h1 1280 1 8 4,8 $D/h1.json 50
step() {  # preset, tag, config, methods, limit
  MHAR_ROUTING_CONFIG=$3 timeout $5 python3 -m mhar bench step --preset paper-$1 --methods $4 --steps 30 \
    --warmup 3 --out $R --tag $1_$2 > $R/step_$1_$2.log 2>&1
  echo "$1 $2"; grep -h "| paper" $R/step_$1_$2.md; rm -f $R/*.png; pack
}
step 350m built "" baseline,mhar-block,mhar 120
step 350m picks $D/c1024.json baseline,mhar-block,mhar 120
