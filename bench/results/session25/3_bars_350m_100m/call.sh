#!/usr/bin/env bash
# session 25 call 3: the bars at 350M (baseline, attnres, mhar) and 100M (every method)
# with merge_scales on by default, 30 steps, one process per preset
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
timeout 210 python3 -m mhar bench step --preset paper-350m --methods baseline,attnres,mhar --steps 30 --warmup 3 --out $R --tag 350m > $R/step_350m.log 2>&1
grep -h "| paper" $R/step_350m.md; rm -f $R/*.png; pack
timeout 150 python3 -m mhar bench step --preset paper-100m --methods baseline,hyper,attnres,mhar,mhar-block --steps 30 --warmup 3 --out $R --tag 100m > $R/step_100m.log 2>&1
grep -h "| paper" $R/step_100m.md; rm -f $R/*.png; pack
