#!/usr/bin/env bash
# The test files with GPU tests, one file at a time, verbose, each file's log written as it
# runs and $OUT/r packed after each: a device call cut at its limit still shows which
# tests passed and failed, and the traceback of every failure in a file that finished.
# Usage (repository root, device machine):
#   C=<commit> OUT=$OUT bash bench/gpu_tests.sh [pytest -k expression]
# (their CPU tests run too: they are quick)
# FILES overrides the list; T_FILE is each file's time limit in seconds (default 300;
# tests/routing/test_triton_cuda.py took 535 s with a cold Triton cache in session 27: run it alone with T_FILE=570).
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=${C:-unknown} PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
FILES=${FILES:-"tests/train/test_activation_checkpointing.py tests/train/test_cuda_graphs.py tests/core/test_fused_ce.py
  tests/core/test_adamw_kernel.py tests/core/test_hyper_kernels.py tests/train/test_bench_step.py tests/routing/test_triton_cuda.py"}
for f in $FILES; do
  log=$R/$(basename $f .py).log
  timeout ${T_FILE:-300} python3 -m pytest "$f" -v --tb=long -p no:cacheprovider ${1:+-k "$1"} > "$log" 2>&1
  echo "$f: rc $? $(grep -c ' PASSED' "$log") passed, $(grep -c ' FAILED' "$log") failed; $(tail -n 1 "$log" | cut -c1-100)"
  pack
done
