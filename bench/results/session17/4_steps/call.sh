#!/usr/bin/env bash
# session 17 call 4: the routing GPU tests call 3's time limit cut (test_partial_other_backward);
# then 30 timed steps per method at 1B, 350M and 100M (baseline, mhar, mhar-block; one
# process per preset), with phase 1's backward in final form and the all-bf16 gather
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
timeout 120 python3 -m pytest tests/routing/test_triton_cuda.py -q -x -p no:cacheprovider -k test_partial_other_backward > $R/tests.log 2>&1; tail -n 1 $R/tests.log; pack
for p in 1b:170 350m:140 100m:110; do
  s=${p%:*}; t=${p#*:}
  timeout $t python3 -m mhar bench step --preset paper-$s --methods baseline,mhar,mhar-block --steps 30 --warmup 3 --out $R --tag ${s}_30 > $R/step_${s}_30.log 2>&1
  grep -h "| paper" $R/step_${s}_30.md; rm -f $R/step_${s}_30.png; pack
done
