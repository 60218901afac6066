#!/usr/bin/env bash
# session 45 call 1: (a) where MHAR's memory at 1B's trainer microbatch (32 x 1024) goes,
# 1.053 x baseline in session 44; (b) the GPU routing tests not run after session 44's grid
# fix: the corrected `more_tokens` test (65,542 tiles) and the three groups not reached.
# run: C=<commit> OUT=$OUT bash bench/results/session45/1_memory_tests/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 230 python3 bench/memory_probe.py --preset paper-1b --methods baseline,mhar --batch global \
  --out $R/memory_1b_global.json > $R/memory_1b_global.log 2>&1
tail -5 $R/memory_1b_global.log; pack
timeout 330 python3 -m pytest -q -p no:cacheprovider tests/routing/test_triton_cuda.py \
  -k "more_tokens or phase_one_one_head_per_program or coef_grads or partial_other_backward" > $R/gpu_tests.log 2>&1
tail -3 $R/gpu_tests.log; pack
