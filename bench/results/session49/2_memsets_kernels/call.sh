#!/usr/bin/env bash
# session 49 call 2: small memset nodes made kernel nodes (mhar.train.graph_memsets, new):
# the API check, its GPU tests, and bench/gemm_memsets.py with and without it.
# run: C=<commit> OUT=$OUT bash bench/results/session49/2_memsets_kernels/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
python3 -c "import torch, triton; from mhar.train import graph_memsets as g; print(torch.__version__, triton.__version__, 'compile_kernel', hasattr(torch.cuda, '_compile_kernel'), 'supported', g.supported())" 2>&1 | tee $R/api.log
timeout 240 python3 -m pytest -q -x tests/train/test_graph_memsets.py 2>&1 | tail -n 30 | tee $R/tests.log; pack
for p in 350m 1b; do
  timeout 120 python3 bench/gemm_memsets.py --preset paper-$p --blas cublas,cublas+kernels --out $R/memsets_$p.json > $R/memsets_$p.log 2>&1
  echo "rc=$? $p"; tail -n 5 $R/memsets_$p.log; pack
done
