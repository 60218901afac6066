#!/usr/bin/env bash
# session 37 call 7: the settings kept from call 6 (the training step's rows): at 1024
# with 8 heads the split forward capped at 160 registers, 12 programs per SM, 2 stages,
# and the COEF pass in 2 stages; one head's lane groups at 1024 four tokens at a time;
# at 1280 with 8 heads the gather uncapped at several tokens a program. One head at 1280
# swept first (direct rows; its gather caps and dot_group_tokens), then the 350M step as
# built and with session 36's settings (../session36.json), one process each.
# run: C=<commit> OUT=$OUT bash bench/results/session37/7_step/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
D=bench/results/session37/7_step
timeout 60 python3 bench/phase1_call.py --direct-rows --d 1280 --n 4,5,8 --queries 8 --heads 1 --iters 20 \
  --sweep $D/h1_1280.json > $R/sweep_1280h1.md 2>&1; grep "^|" $R/sweep_1280h1.md | grep -v -- "---"; pack
step() {  # preset, tag, config, methods, limit
  MHAR_ROUTING_CONFIG=$3 timeout $5 python3 -m mhar bench step --preset paper-$1 --methods $4 --steps 30 \
    --warmup 3 --out $R --tag $1_$2 > $R/step_$1_$2.log 2>&1
  echo "$1 $2"; grep -h "| paper" $R/step_$1_$2.md; rm -f $R/*.png; pack
}
step 350m built "" baseline,mhar,mhar-block,attnres-block 170
step 350m session36 bench/results/session37/session36.json baseline,mhar,mhar-block,attnres-block 170
