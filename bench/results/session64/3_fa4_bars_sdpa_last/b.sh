#!/usr/bin/env bash
# Session 64, call 3b (carry .whl/fa4b, right after 3a): every bar at 100M and 350M with FA4's
# attention in every method, as call 2 but with the cuDNN baseline row last
# (baseline+attention_kernel=sdpa): in call 2 it ran second, and what it left allocated
# (cuDNN's workspace) may have counted in every later row's peak memory. Then
# tests/core/test_fa4.py, whose GPU test now covers head dims 64, 96 and 128 with grouped-query heads.
# TESTS=0 leaves the tests out.
# run (carry .whl/fa4b): C=<commit> OUT=$OUT bash bench/results/session64/3_fa4_bars_sdpa_last/b.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
source "$(dirname "$0")/../../session63/fa4_site.sh" > $R/site.log 2>&1; echo "fa4 site rc=$? at ${SECONDS}s"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv,noheader | tee $R/gpu.csv
pack() { tar czf $OUT/r.tar.gz -C $OUT r; }
for p in 100m:150 350m:200; do
  size=${p%:*}; limit=${p#*:}; left=$((480 - SECONDS))
  [ $limit -gt $left ] && limit=$left
  [ $limit -lt 60 ] && { echo "$size: no time left"; continue; }
  timeout $limit python3 -m mhar bench step --preset paper-$size \
    --methods baseline,hyper,attnres,mhar,mhar-block,baseline+attention_kernel=sdpa \
    --steps 30 --warmup 3 --out $R --tag $size attention_kernel=fa4 > $R/step_$size.log 2>&1
  echo "rc=$? $size at ${SECONDS}s"; grep -h "| paper" $R/step_$size.md | grep -v "| >=\|| <=" | sort -u; rm -f $R/*.png; pack
done
left=$((580 - SECONDS))
if [ "${TESTS:-1}" = 1 ] && [ $left -gt 40 ]; then
  OMP_NUM_THREADS=4 timeout $left python3 -m pytest -q -p no:cacheprovider tests/core/test_fa4.py -rs > $R/test_fa4.log 2>&1
  echo "test_fa4 rc=$? at ${SECONDS}s"; tail -3 $R/test_fa4.log; pack
fi
