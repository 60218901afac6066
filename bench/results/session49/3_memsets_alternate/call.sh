#!/usr/bin/env bash
# session 49 call 3: the products' graph with its memsets and with them made kernel nodes,
# alternating rounds in one process without a profiler (bench/gemm_memsets.py --alternate),
# at 350M and 1B; then the GPU tests of mhar.train.graph_memsets.
# run: C=<commit> OUT=$OUT bash bench/results/session49/3_memsets_alternate/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
for p in 350m 1b; do
  timeout 150 python3 bench/gemm_memsets.py --preset paper-$p --blas cublas --reps 10 --alternate 8 --out $R/alternate_$p.json > $R/alternate_$p.log 2>&1
  echo "rc=$? $p"; tail -n 6 $R/alternate_$p.log; pack
done
timeout 200 python3 -m pytest -q tests/train/test_graph_memsets.py 2>&1 | tail -n 15 | tee $R/tests.log; pack
