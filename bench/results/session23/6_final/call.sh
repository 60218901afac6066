#!/usr/bin/env bash
# session 23 call 6: the GPU tests of one head's lane groups at the shipped stages (the
# forward in 3, the COEF pass in 2) and of the two-phase paths; then 100M with every
# method, 30 timed steps, one process
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
timeout 200 python3 -m pytest tests/routing/test_triton_cuda.py -q -x -k "lane_groups or fused_phase_two or phase_one_rows or partial_other_backward" > $R/tests_routing.log 2>&1; tail -n 1 $R/tests_routing.log; pack
timeout 200 python3 -m mhar bench step --preset paper-100m --methods baseline,hyper,attnres,mhar,mhar-block --steps 30 --warmup 3 --out $R --tag 100m > $R/step_100m.log 2>&1
grep -h "| paper" $R/step_100m.md; rm -f $R/*.png; pack
