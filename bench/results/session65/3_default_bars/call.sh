#!/usr/bin/env bash
# Session 65, call 3: the bars at the defaults, now with MHAR_CE_HAND_OVER on (as session 64's
# 1_default_bars: `mhar bench step`, all five methods, each preset in one process, 30 timed
# steps, graphed). On an H200, 100M then 350M; on another card 100M only (the routed ratios
# with the new default).
# run: C=<commit> OUT=$OUT bash bench/results/session65/3_default_bars/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv,noheader | tee $R/gpu.csv
sizes="100m:130 350m:180"
grep -q H200 $R/gpu.csv || sizes="100m:130"
for p in $sizes; do
  size=${p%:*}; limit=${p#*:}
  timeout $limit python3 -m mhar bench step --preset paper-$size --methods baseline,hyper,attnres,mhar,mhar-block \
    --steps 30 --warmup 3 --out $R --tag $size > $R/step_$size.log 2>&1
  echo "rc=$? $size at ${SECONDS}s"; grep -h "| paper" $R/step_$size.md | grep -v "| >=\|| <=" | sort -u; rm -f $R/*.png
  tar czf $OUT/r.tar.gz -C $OUT r  # one archive: a call returns only a few files
done
