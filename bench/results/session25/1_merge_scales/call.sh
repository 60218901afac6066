#!/usr/bin/env bash
# session 25 call 1: op's merge_scales (phase 2 hands its newest source's key-norm scales
# to the next chunk's phase 1) on the GPU for the first time: its GPU test and the CUDA
# accumulator test; the whole-step routing at 1280/36, 8 heads, chunk 8, off and on
# alternating in one process; then the 1B baseline and mhar, off (one process) and on
# (MHAR_ROUTING_CONFIG, another process), 30 steps
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
echo '{"*": {"merge_scales": true}}' > $R/merge_scales.json
timeout 120 python3 -m pytest tests/routing/test_triton_cuda.py tests/core/test_fused_ce.py -q -k "merge_hands or accumulator_first" > $R/tests.log 2>&1; tail -n 1 $R/tests.log; pack
timeout 150 python3 bench/routing.py --step-only --no-one-pass --no-peers --shapes 1280/36 --heads 8 --chunk 8 \
  --phase1 '{"": null, "merge scales": {"merge_scales": true}, "again": null, "merge scales again": {"merge_scales": true}}' \
  --out $R/routing_1280.json > $R/routing_1280.log 2>&1
grep -h "whole step" $R/routing_1280.log; pack
for m in off on; do
  env $([ $m = on ] && echo MHAR_ROUTING_CONFIG=$R/merge_scales.json) timeout 170 python3 -m mhar bench step --preset paper-1b \
    --methods baseline,mhar --steps 30 --warmup 3 --out $R --tag 1b_$m > $R/step_1b_$m.log 2>&1
  echo "merge_scales $m"; grep -h "| paper" $R/step_1b_$m.md; rm -f $R/*.png; pack
done
