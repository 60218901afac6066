#!/usr/bin/env bash
# Session 63, staged for an H200 (not run): every bar with FA4's attention in every method, as
# session 59's call 2 (`mhar bench step`, all five methods, each preset in one process, 30
# timed steps, graphed), the model override attention_kernel=fa4 for the run (FA4 at 100M and
# 350M, head dim 64; SDPA at 1B, head dim 80). FA4 must be on the machine first: a call
# carrying .whl/fa4a, then this one carrying .whl/fa4b while the machine is warm (README.md).
# run: C=<commit> OUT=$OUT bash bench/results/session63/2_fa4_bars/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
source "$(dirname "$0")/../fa4_site.sh"
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $R/gpu.csv
for p in 350m:200 100m:150 1b:0; do
  size=${p%:*}; limit=${p#*:}; [ $limit = 0 ] && limit=$((590 - SECONDS))
  timeout $limit python3 -m mhar bench step --preset paper-$size --methods baseline,hyper,attnres,mhar,mhar-block \
    --steps 30 --warmup 3 --out $R --tag $size attention_kernel=fa4 > $R/step_$size.log 2>&1
  echo "rc=$? $size at ${SECONDS}s"; grep -h "| paper" $R/step_$size.md | grep -v "| >=\|| <=" | sort -u; rm -f $R/*.png
  tar czf $OUT/r.tar.gz -C $OUT r
done
