#!/usr/bin/env bash
# session 53 call 4 (as session 49's call 4): every bar at one commit: mhar bench step, every method, each preset
# in one process (the bench's default microbatches, 30 timed steps, graphed).
# run: C=<commit> OUT=$OUT bash bench/results/session53/4_bars/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
step() {  # preset limit
  timeout $2 python3 -m mhar bench step --preset paper-$1 --methods baseline,hyper,attnres,mhar,mhar-block \
    --steps 30 --warmup 3 --out $R --tag $1 > $R/step_$1.log 2>&1
  echo "rc=$? $1"; grep -h "| paper" $R/step_$1.md | sort -u; rm -f $R/*.png; pack
}
step 100m 130
step 350m 170
step 1b 285
