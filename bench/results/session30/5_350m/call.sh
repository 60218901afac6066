#!/usr/bin/env bash
# session 30 call 5: the 350M rows at the shipped code (last measured in session 28):
# baseline, mhar and mhar-block in one process. 30 timed steps, 3 warm-up.
# run: C=<commit> OUT=$OUT bash bench/results/session30/5_350m/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
timeout 200 python3 -m mhar bench step --preset paper-350m --methods baseline,mhar,mhar-block --steps 30 --warmup 3 \
  --out $R --tag 350m > $R/step_350m.log 2>&1
echo "350m at $(( $(date +%s) - t0 )) s:"; grep -h '| paper' $R/step_350m.md; rm -f $R/*.png
tar czf "$OUT/r.tar.gz" -C "$OUT" r
