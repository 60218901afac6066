#!/usr/bin/env bash
# session 31 call 6: the 1B rows at the shipped code: baseline, mhar and
# mhar-block, one process (the machine of calls 4-5, still warm).
# 30 timed steps, 3 warm-up.
# run: C=<commit> OUT=$OUT bash bench/results/session31/6_1b/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 280 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar,mhar-block --steps 30 --warmup 3 \
  --out $R --tag 1b  > $R/step_1b.log 2>&1
cat $R/step_1b.md; rm -f $R/*.png; pack
