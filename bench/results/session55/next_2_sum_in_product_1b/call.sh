#!/usr/bin/env bash
# Session 55, staged: as next_1_sum_in_product, at 1B (on, off), then 350M again in the
# other order (off, on).
# run: C=<commit> OUT=$OUT bash bench/results/session55/next_2_sum_in_product_1b/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
. bench/results/session55/step_ab.sh
step_ab 1b on 160
step_ab 1b off 160 stream.sum_in_product=false
step_ab 350m off 110 stream.sum_in_product=false
step_ab 350m on $((590 - SECONDS))
