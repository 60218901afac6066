#!/usr/bin/env bash
# session 49 call 7: bench/gemm_memsets.py after its capture moved to
# attention_bench.capture_graph(edit=...): 100M, the plain graph and the edited one.
# run: C=<commit> OUT=$OUT bash bench/results/session49/7_refactor_check/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
timeout 150 python3 bench/gemm_memsets.py --preset paper-100m --blas cublas,cublas+kernels --reps 10 --alternate 3 \
  --out $R/memsets_100m.json > $R/memsets_100m.log 2>&1
echo "rc=$?"; tail -n 7 $R/memsets_100m.log
