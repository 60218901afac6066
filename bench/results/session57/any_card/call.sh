#!/usr/bin/env bash
# Session 57: whichever card comes. On an H200, the 100M/350M sum-in-product A/B (the
# issue's card; session 56 ran it on an H100 only); on anything else, session 55's 1B A/B,
# one order (sequential, which fits an H100). Then, in the time left, the GPU tests of the
# streams (this session changed their host-side glue) and of the CUDA graphs.
# run: C=<commit> OUT=$OUT bash bench/results/session57/any_card/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
. bench/results/session55/step_ab.sh
if grep -q H200 $R/gpu.csv; then
  step_ab 100m interleave 170 --interleave
  step_ab 350m interleave $((440 - SECONDS)) --interleave
else
  step_ab 1b seq_on_first 330
fi
timeout $((545 - SECONDS)) python3 -m pytest -q -p no:cacheprovider -x tests/core/test_streams.py \
  tests/core/test_streams_own_model.py tests/train/test_cuda_graphs.py > $R/gpu_tests.log 2>&1
echo "gpu tests exit $? at ${SECONDS}s"; tail -3 $R/gpu_tests.log; pack
