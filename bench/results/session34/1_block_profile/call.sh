#!/usr/bin/env bash
# session 34 call 1: where two-phase block MHAR's time goes. Its byte count is about a
# third below one-pass block's, yet it measured the same step (sessions 9, 25, 33). The
# graphed 350M step of baseline, mhar-block (one-pass) and mhar-block@two-phase, by kernel
# (bench/profile_step.py); then the 1B step of baseline, mhar-block and
# mhar-block@two-phase with bf16 rows (not measured in session 33), one process.
# run: C=<commit> OUT=$OUT bash bench/results/session34/1_block_profile/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 300 python3 bench/profile_step.py --preset paper-350m --methods baseline,mhar-block,mhar-block@two-phase \
  --out $R > $R/profile_350m.log 2>&1
tail -n 30 $R/profile_350m.log | cut -c1-200; pack
timeout 240 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar-block,mhar-block@two-phase \
  --steps 30 --warmup 3 --out $R --tag 1b > $R/step_1b.log 2>&1
grep -h "| paper" $R/step_1b.md; rm -f $R/*.png; pack
