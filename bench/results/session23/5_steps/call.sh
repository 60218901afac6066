#!/usr/bin/env bash
# session 23 call 5: the training step with one head as lane groups reading the scales (attnres): baseline,
# attnres and mhar, 30 timed steps, one process per preset (1B, then 350M)
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
for p in 1b 350m; do
  timeout 270 python3 -m mhar bench step --preset paper-$p --methods baseline,attnres,mhar --steps 30 --warmup 3 --out $R --tag $p > $R/step_$p.log 2>&1
  grep -h "| paper" $R/step_$p.md; rm -f $R/*.png; pack
done
