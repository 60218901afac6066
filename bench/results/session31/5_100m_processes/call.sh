#!/usr/bin/env bash
# session 31 call 5: the 100M rows at the shipped code: baseline, mhar and
# mhar-block, two fresh processes (the machine of call 4, still warm).
# 30 timed steps, 3 warm-up.
# run: C=<commit> OUT=$OUT bash bench/results/session31/5_100m_processes/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 300 python3 -m mhar bench step --preset paper-100m --methods baseline,mhar,mhar-block --steps 30 --warmup 3 \
  --out $R --tag 100m --processes 2 > $R/step_100m.log 2>&1
cat $R/step_100m.md; rm -f $R/*.png; pack
