#!/usr/bin/env bash
# session 33 call 5: block MHAR (8 blocks, 8 heads) two-phase against one-pass (the
# 'auto' default) now that phase 1's rows are bf16: baseline, mhar-block and
# mhar-block@two-phase at 350M (1B did not fit the device time left), one process, 30 timed steps, 3 warm-up.
# run: C=<commit> OUT=$OUT bash bench/results/session33/5_block_two_phase/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
for p in 350m; do
  timeout 200 python3 -m mhar bench step --preset paper-$p --methods baseline,mhar-block,mhar-block@two-phase --steps 30 --warmup 3 \
    --out $R --tag $p > $R/step_$p.log 2>&1
  grep -h "| paper" $R/step_$p.md; rm -f $R/*.png; pack
done
