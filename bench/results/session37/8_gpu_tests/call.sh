#!/usr/bin/env bash
# session 37 call 8: the GPU tests of the few-source kernels under this session's launch
# settings (at 1024 with 8 heads the split forward capped at 160 registers, twelve
# programs per SM, 2 stages; the COEF pass in 2 stages): test_tokens_per_step, in what
# device time was left.
# run: C=<commit> OUT=$OUT bash bench/results/session37/8_gpu_tests/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 165 python3 -m pytest -v -p no:cacheprovider tests/routing/test_triton_cuda.py -k "tokens_per_step" \
  > $R/tests.log 2>&1
grep -E "PASSED|FAILED|ERROR|passed|failed" $R/tests.log | tail -8
