#!/usr/bin/env bash
# session 40 call 6: the final code (phase 1's forward capped at 168 registers at 1024,
# the fused COEF pass's 16-byte rows): the GPU tests of phase 1 with a head per program,
# the fused pass, the sink and the phase-1 rows; the 350M step, baseline, mhar and
# mhar-block in one process.
# run: C=<commit> OUT=$OUT bash bench/results/session40/6_final/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/routing/test_triton_cuda.py \
  -k "test_phase_one_one_head_per_program or test_coef_grads or test_gradient_sink or test_phase_one_rows or test_tokens_per_step" \
  > $R/tests.log 2>&1
tail -n 8 $R/tests.log | cut -c1-300; pack
timeout 200 python3 -m mhar bench step --preset paper-350m --methods baseline,mhar,mhar-block --steps 30 \
  --warmup 3 --out $R --tag 350m > $R/step_350m.log 2>&1
grep -h "| paper" $R/step_350m.md | sort -u; tail -n 2 $R/step_350m.log | cut -c1-300; rm -f $R/*.png; pack
