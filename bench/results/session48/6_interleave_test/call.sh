#!/usr/bin/env bash
# session 48 call 6 (and 7, the same after the fix below): the interleave test with its memory check in fresh processes (call 5
# compared against a sequential run in the test's own process, whose rows count what
# earlier runs left allocated).
# run: C=<commit> OUT=$OUT bash bench/results/session48/6_interleave_test/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/train/test_bench_step.py -k "interleaved" \
  > $R/tests.log 2>&1; echo "rc=$? tests"; tail -2 $R/tests.log
grep -h "| tiny" $(ls -d /tmp/pytest-of-*/pytest-*/test_bench_step_interleaved0 2>/dev/null | tail -1)/step_f*.md 2>/dev/null
