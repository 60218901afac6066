#!/usr/bin/env bash
# session 36 call 3: the GPU tests of phase 1's kernels with several tokens at a time
# (calls 1 and 2 cut theirs at 150 and 170 s, none failed before the cut), to the end,
# with each test's duration.
# run: C=<commit> OUT=$OUT bash bench/results/session36/3_gpu_tests/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 330 python3 -m pytest -q -p no:cacheprovider --durations=0 tests/routing/test_triton_cuda.py \
  -k "tokens_per_step or gradient_sink_block" > $R/tests.log 2>&1
grep -E "passed|failed" $R/tests.log | tail -n 2; pack
