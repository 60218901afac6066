#!/usr/bin/env bash
# session 19 call 3: 30 timed training steps at 1B and 350M (baseline and mhar; the
# gather's new walk with its sources as products, uncapped at 1280), then the GPU
# routing tests that calls 1 and 2 did not run
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
for p in 1b 350m; do
  timeout 130 python3 -m mhar bench step --preset paper-$p --methods baseline,mhar --steps 30 --warmup 3 --out $R --tag $p > $R/step_$p.log 2>&1
  grep -h "| paper" $R/step_$p.md; rm -f $R/*.png; pack
done
timeout 320 python3 -m pytest tests/routing/test_triton_cuda.py -q -p no:cacheprovider -k "not (partial or two_phase or phase_one_rows or sink)" > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
