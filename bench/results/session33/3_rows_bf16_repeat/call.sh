#!/usr/bin/env bash
# session 33 call 3: "rows_bf16" again. The routing kernels' sum per step, on and off, at
# the 100M and 1B shapes (512/12, 1280/36; 8 heads, chunks of 8), then 1B and 350M
# baseline and mhar with the order reversed from calls 1-2 (off first), one process each.
# run: C=<commit> OUT=$OUT bash bench/results/session33/3_rows_bf16_repeat/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
echo '{"*": {"rows_bf16": false}}' > $R/rows_fp32.json
for s in 1280/36 512/12; do
  f=$(echo $s | tr / _)
  timeout 120 python3 bench/routing.py --step-only --no-one-pass --no-peers --shapes $s --heads 8 --chunk 8 \
    --phase1 '{"rows bf16": null, "rows fp32": {"rows_bf16": false}}' \
    --out $R/routing_$f.json > $R/routing_$f.log 2>&1
  grep -h "whole step" $R/routing_$f.log; pack
done
for p in 1b 350m; do for m in off on; do
  env $([ $m = off ] && echo MHAR_ROUTING_CONFIG=$R/rows_fp32.json) timeout 140 python3 -m mhar bench step --preset paper-$p \
    --methods baseline,mhar --steps 30 --warmup 3 --out $R --tag ${p}_$m > $R/step_${p}_$m.log 2>&1
  echo "rows_bf16 $p $m"; grep -h "| paper" $R/step_${p}_$m.md; rm -f $R/*.png; pack
done; done
