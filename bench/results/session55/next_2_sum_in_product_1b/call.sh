#!/usr/bin/env bash
# Session 55, staged: as next_1_sum_in_product at 1B, one method after another (two 1B
# models alive, as --interleave holds them, need about 104 GB: an H200's, not an H100's):
# the baseline, mhar-block and mhar-block+stream.sum_in_product=false in one process, then
# a second process with the two block rows in the other order.
# run: C=<commit> OUT=$OUT bash bench/results/session55/next_2_sum_in_product_1b/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
. bench/results/session55/step_ab.sh
step_ab 1b seq_on_first 270
ORDER=off step_ab 1b seq_off_first $((590 - SECONDS))
