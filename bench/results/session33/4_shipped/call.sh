#!/usr/bin/env bash
# session 33 call 4: the rows at the shipped code (rows_bf16 on): baseline, mhar and
# mhar-block at 350M, 1B and 100M, one process each, 30 timed steps, 3 warm-up.
# run: C=<commit> OUT=$OUT bash bench/results/session33/4_shipped/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
for p in 350m 1b 100m; do
  timeout 170 python3 -m mhar bench step --preset paper-$p --methods baseline,mhar,mhar-block --steps 30 --warmup 3 \
    --out $R --tag $p > $R/step_$p.log 2>&1
  grep -h "| paper" $R/step_$p.md; rm -f $R/*.png; pack
done
