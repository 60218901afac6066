#!/usr/bin/env bash
# session 42 call 5: the routing GPU tests at the session's final code (a cold triton
# cache: cut at 380 s if they take longer; -v so that a cut run still lists what passed).
# run: C=<commit> OUT=$OUT bash bench/results/session42/5_gpu_tests/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 380 python3 -m pytest -v -p no:cacheprovider tests/routing/test_triton_cuda.py > $R/tests.log 2>&1
echo "rc $?"; grep -c PASSED $R/tests.log; grep -E "FAILED|ERROR" $R/tests.log | head; tail -2 $R/tests.log
