#!/usr/bin/env bash
# Session 55, staged (no GPU was lent in session 55): block routing's running sum formed in
# the later sublayers' output projection (stream.sum_in_product, addmm's C operand)
# against the separate add.
# 1. GPU tests: the fused-against-separate test on CUDA (fp32, eager and compiled), the
#    CUDA-graph tests (replay against eager and the trainer, with blocks of 3 sublayers
#    among them: "mhar-block:3") and the checkpointed graphed runs;
# 2. 100M and 350M: the baseline, mhar-block and mhar-block+stream.sum_in_product=false in
#    one process, --interleave (each method's steps in turn with the baseline's, both
#    models alive: 2 x 28 GB at 350M), 30 timed steps each, graphed.
# run: C=<commit> OUT=$OUT bash bench/results/session55/next_1_sum_in_product/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/core/test_streams.py::test_block_sum_in_product_equals_the_separate_add \
  tests/train/test_cuda_graphs.py tests/train/test_activation_checkpointing.py > $R/gpu_tests.log 2>&1
echo "gpu tests exit $? at ${SECONDS}s"; tail -2 $R/gpu_tests.log; pack
. bench/results/session55/step_ab.sh
step_ab 100m interleave 150 --interleave
step_ab 350m interleave $((590 - SECONDS)) --interleave
