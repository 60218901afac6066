#!/usr/bin/env bash
# session 31 call 4: the 350M rows at the shipped code (fused projections reverted), the
# call session 30 could not start: baseline, mhar and mhar-block, two fresh processes.
# 30 timed steps, 3 warm-up.
# run: C=<commit> OUT=$OUT bash bench/results/session31/4_350m_processes/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 420 python3 -m mhar bench step --preset paper-350m --methods baseline,mhar,mhar-block --steps 30 --warmup 3 \
  --out $R --tag 350m --processes 2 > $R/step_350m.log 2>&1
cat $R/step_350m.md; rm -f $R/*.png; pack
