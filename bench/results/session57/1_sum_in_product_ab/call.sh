#!/usr/bin/env bash
# Session 57: session 55's staged A/B (block routing's running sums formed in the later
# sublayers' output projections, stream.sum_in_product, against the separate add) at 100M
# and 350M, without the GPU tests (session 56 ran those). One process per preset, the
# baseline and the two mhar-block rows interleaved, 30 timed steps each, graphed.
# run: C=<commit> OUT=$OUT bash bench/results/session57/1_sum_in_product_ab/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
. bench/results/session55/step_ab.sh
step_ab 100m interleave 200 --interleave
step_ab 350m interleave $((590 - SECONDS)) --interleave
