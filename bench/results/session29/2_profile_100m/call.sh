#!/usr/bin/env bash
# session 29 call 2: where the 100M step's time goes for baseline, mhar (H = 8) and
# mhar-block, graphed, by kernel kind (bench/profile_step.py), one process
# run: C=<commit> OUT=$OUT bash bench/results/session29/2_profile_100m/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
t0=$(date +%s)
timeout 400 python3 bench/profile_step.py --preset paper-100m --methods baseline,mhar,mhar-block --out $R \
  > $R/profile_100m.log 2>&1; tail -45 $R/profile_100m.log; pack
echo "done at $(( $(date +%s) - t0 )) s"
