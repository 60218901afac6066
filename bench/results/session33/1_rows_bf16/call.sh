#!/usr/bin/env bash
# session 33 call 1 (written in session 32): op's "rows_bf16" (direct phase-1 rows keep o in bf16, not fp32) on
# the GPU for the first time: its GPU tests; the whole routing step at 1024/24, 8 heads,
# chunks of 8, on and off in one process; then the 350M baseline and mhar, on (the
# default) and off (MHAR_ROUTING_CONFIG), one process each.
# run: C=<commit> OUT=$OUT bash bench/results/session33/1_rows_bf16/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
echo '{"*": {"rows_bf16": false}}' > $R/rows_fp32.json
timeout 150 python3 -m pytest tests/routing/test_triton_cuda.py -q -x -k "rows or finaliz or two_phase or merge or sink" \
  > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
for s in 1024/24; do
  f=$(echo $s | tr / _)
  timeout 150 python3 bench/routing.py --step-only --no-one-pass --no-peers --shapes $s --heads 8 --chunk 8 \
    --phase1 '{"rows bf16": null, "rows fp32": {"rows_bf16": false}}' \
    --out $R/routing_$f.json > $R/routing_$f.log 2>&1
  grep -h "whole step" $R/routing_$f.log; pack
done
for p in 350m; do for m in on off; do
  env $([ $m = off ] && echo MHAR_ROUTING_CONFIG=$R/rows_fp32.json) timeout 140 python3 -m mhar bench step --preset paper-$p \
    --methods baseline,mhar --steps 30 --warmup 3 --out $R --tag ${p}_$m > $R/step_${p}_$m.log 2>&1
  echo "rows_bf16 $p $m"; grep -h "| paper" $R/step_${p}_$m.md; rm -f $R/*.png; pack
done; done
