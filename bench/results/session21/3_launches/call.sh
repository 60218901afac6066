#!/usr/bin/env bash
# session 21 call 3: fewer launches per routing site (the dw sum and both weight
# gradients in one kernel, w kept from the forward, lse written by the phase-2 backward,
# pointer tables made once per capture; "new") against 5b394c8's src/ ("old", ab_old/):
# 30 timed steps at 1B (baseline and mhar new, mhar old, in separate processes), then
# 350M (new); the GPU tests of the changed paths last.
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
step() {  # preset methods src tag
  PYTHONPATH=$3 timeout 150 python3 -m mhar bench step --preset paper-$1 --methods $2 --steps 30 --warmup 3 --out $R --tag $4 > $R/step_$4.log 2>&1
  grep -h "| paper" $R/step_$4.md; rm -f $R/*.png; pack
}
step 1b baseline,mhar $PWD/src 1b_new
step 1b mhar $PWD/ab_old/src 1b_old
step 1b mhar $PWD/src 1b_new2
step 350m baseline,mhar $PWD/src 350m_new
export PYTHONPATH=$PWD/src
timeout 100 python3 -m pytest tests/train/test_cuda_graphs.py -q -x > $R/tests_graphs.log 2>&1; tail -n 2 $R/tests_graphs.log
timeout 200 python3 -m pytest tests/routing/test_triton_cuda.py -q -x -k "deterministic or two_phase or fused_phase_two or phase_one_rows or gradient_sink or route_bf16 or partial_bf16" > $R/tests_routing.log 2>&1; tail -n 2 $R/tests_routing.log; pack
