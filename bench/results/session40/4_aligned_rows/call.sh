#!/usr/bin/env bash
# session 40 call 4: the fused COEF pass (coef_grads) with its gradient and w rows loaded
# 16 bytes at a time (the alignment hint after the select; before, 2-byte loads: 128 a loop
# step, 1,793 -> 1,294 SASS instructions offline at 1024). (1) one phase-1 read at 1024
# and 1280, fused against the two passes, with this kernel file and with the one before
# (the file at 16bcb0c); (2) the GPU tests of the fused pass and the
# sink; (3) the 350M step with the new file and the old, one process each, alternating.
# The old file is not kept here (it ran as a copy in this folder): make it first with
#   git show 16bcb0c:src/mhar/routing/triton_kernels.py > /tmp/triton_kernels_before.py
# run: C=<commit> OUT=$OUT bash bench/results/session40/4_aligned_rows/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
D=bench/results/session40/4_aligned_rows
NEW=$PWD/src; OLD=/tmp/old/src
mkdir -p /tmp/old && cp -r src /tmp/old/ && cp /tmp/triton_kernels_before.py $OLD/mhar/routing/triton_kernels.py
sweep() {  # tree, tag, d, sources
  PYTHONPATH=$1 timeout 90 python3 bench/phase1_call.py --direct-rows --d $3 --n $4 --queries 8 --heads 8 --iters 10 \
    --sweep $D/sweep.json > $R/sweep_$2.md 2>&1; echo "$2"; grep "^|" $R/sweep_$2.md | grep -v -- "---"; tail -n 1 $R/sweep_$2.md; pack
}
sweep $NEW new_1024 1024 9,25,41
sweep $OLD old_1024 1024 9,25,41
sweep $NEW new_1280 1280 17,41,65
PYTHONPATH=$NEW timeout 150 python3 -m pytest -q -p no:cacheprovider tests/routing/test_triton_cuda.py \
  -k "test_gradient_sink or test_coef_grads" > $R/tests.log 2>&1
tail -n 8 $R/tests.log | cut -c1-300; pack
step() {  # tree, preset, tag, methods, limit
  PYTHONPATH=$1 timeout $5 python3 -m mhar bench step --preset paper-$2 --methods $4 --steps 30 \
    --warmup 3 --out $R --tag $2_$3 > $R/step_$2_$3.log 2>&1
  echo "$2 $3"; grep -h "| paper" $R/step_$2_$3.md | sort -u; tail -n 2 $R/step_$2_$3.log | cut -c1-300; rm -f $R/*.png; pack
}
step $NEW 350m new_a baseline,mhar 125
step $OLD 350m old_a baseline,mhar 125
