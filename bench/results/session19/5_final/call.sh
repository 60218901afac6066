#!/usr/bin/env bash
# session 19 call 5: the final gather config (capped at 128 at 1280 with several heads):
# the GPU tests that run phase 1's gather, then 30 timed training steps at 1B (baseline
# and mhar)
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
timeout 200 python3 -m pytest tests/routing/test_triton_cuda.py -q -p no:cacheprovider -k "partial or two_phase or phase_one_rows or sink" > $R/tests.log 2>&1; tail -n 2 $R/tests.log; pack
timeout 150 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar --steps 30 --warmup 3 --out $R --tag 1b > $R/step_1b.log 2>&1
grep -h "| paper" $R/step_1b.md; rm -f $R/*.png; pack
