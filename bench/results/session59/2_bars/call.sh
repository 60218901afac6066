#!/usr/bin/env bash
# Session 58, run in session 59 (moved here from session58/bars): every bar at one commit, as session 53's call 3 (`mhar bench step`, all five
# methods, each preset in one process, 30 timed steps, graphed). The step code is session
# 53's; since then the streams' host-side glue changed (session 57: state.step's keywords,
# the routed write's cast and order checks), so this checks the step did not move.
# run: C=<commit> OUT=$OUT bash bench/results/session59/2_bars/call.sh
# Session 59: also after the attention padding mask (90e9bed), which changed the sublayers' signature
# and the decoder's positions (no mask in training: the same calls).
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $R/gpu.csv
for p in 100m:120 350m:170 1b:0; do
  size=${p%:*}; limit=${p#*:}; [ $limit = 0 ] && limit=$((590 - SECONDS))
  timeout $limit python3 -m mhar bench step --preset paper-$size --methods baseline,hyper,attnres,mhar,mhar-block \
    --steps 30 --warmup 3 --out $R --tag $size > $R/step_$size.log 2>&1
  echo "rc=$? $size at ${SECONDS}s"; grep -h "| paper" $R/step_$size.md | grep -v "| >=\|| <=" | sort -u; rm -f $R/*.png
  tar czf $OUT/r.tar.gz -C $OUT r  # one archive: a call returns only a few files
done
