#!/usr/bin/env bash
# Session 64, call 1: every bar at the default settings (cuDNN's attention through SDPA), as
# session 59's call 2 (`mhar bench step`, all five methods, each preset in one process, 30
# timed steps, graphed), on whatever card came (the bars are set for the H200; gpu.csv names
# the card; on another card 1B is left out). The call also carries .whl/fa4a, so FA4's site is assembled first for call 2
# (which must follow on the same warm machine, carrying .whl/fa4b): see session63/README.md.
# run (carry .whl/fa4a): C=<commit> OUT=$OUT bash bench/results/session64/1_default_bars/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
# in a subshell: a failed install must not stop the bars
( source "$(dirname "$0")/../../session63/fa4_site.sh" ) > $R/site.log 2>&1; echo "fa4 site rc=$? at ${SECONDS}s"
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv,noheader | tee $R/gpu.csv
sizes="100m:130 350m:180 1b:0"  # 1B only on an H200 (with FA4 it runs SDPA, so call 2 has no 1B to compare)
grep -q H200 $R/gpu.csv || sizes="100m:130 350m:180"
for p in $sizes; do
  size=${p%:*}; limit=${p#*:}; left=$((590 - SECONDS))
  [ $limit = 0 ] || [ $limit -gt $left ] && limit=$left
  [ $limit -lt 60 ] && { echo "$size: no time left"; continue; }
  timeout $limit python3 -m mhar bench step --preset paper-$size --methods baseline,hyper,attnres,mhar,mhar-block \
    --steps 30 --warmup 3 --out $R --tag $size > $R/step_$size.log 2>&1
  echo "rc=$? $size at ${SECONDS}s"; grep -h "| paper" $R/step_$size.md | grep -v "| >=\|| <=" | sort -u; rm -f $R/*.png
  tar czf $OUT/r.tar.gz -C $OUT r  # one archive: a call returns only a few files
done
