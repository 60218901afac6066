#!/usr/bin/env bash
# session 41 call 3: the final code (the fused COEF pass with w as one bf16 part, on at
# 1024 and 1280): GPU tests of the fused pass, the sink and phase 1; the 1B and 350M
# steps with baseline, mhar and mhar-block, two processes each.
# run: C=<commit> OUT=$OUT bash bench/results/session41/3_final/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/routing/test_triton_cuda.py \
  -k "coef_grads or sink or phase_one or split" > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
for run in 1 2; do
  for p in 1b 350m; do
    timeout 130 python3 -m mhar bench step --preset paper-$p --methods baseline,mhar,mhar-block \
      --steps 30 --warmup 3 --out $R --tag ${p}_$run > $R/step_${p}_$run.log 2>&1
    grep -h "| paper" $R/step_${p}_$run.md | sort -u; rm -f $R/*.png; pack
  done
done
