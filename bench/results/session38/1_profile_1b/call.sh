#!/usr/bin/env bash
# session 38 call 1: where full MHAR's extra time goes at 350M with session 37's settings
# (the graphed step of baseline and mhar by kernel, bench/profile_step.py), then the 1B
# step of baseline, mhar and mhar-block as built (session 37's 1280 settings were not run
# at 1B), one process.
# run: C=<commit> OUT=$OUT bash bench/results/session38/1_profile_1b/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 220 python3 bench/profile_step.py --preset paper-350m --methods baseline,mhar \
  --out $R > $R/profile_350m.log 2>&1
tail -n 28 $R/profile_350m.log | cut -c1-160; pack
timeout 240 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar,mhar-block \
  --steps 30 --warmup 3 --out $R --tag 1b > $R/step_1b.log 2>&1
grep -h "| paper" $R/step_1b.md; rm -f $R/*.png; pack
