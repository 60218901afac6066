#!/usr/bin/env bash
# session 24 call 7: the accumulator tests (CPU modes and the mode probed on the GPU) and the CUDA fused-loss test
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
timeout 60 python3 -m pytest tests/core/test_fused_ce.py -q -x -k "accumulator or cuda_fused" -s > $R/tests.log 2>&1; grep -E "accumulation mode|passed|failed" $R/tests.log
