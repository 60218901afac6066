#!/usr/bin/env bash
# session 24 call 6: 350M baseline, attnres and mhar at this commit, 30 steps, one process
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
timeout 200 python3 -m mhar bench step --preset paper-350m --methods baseline,attnres,mhar --steps 30 --warmup 3 --out $R --tag 350m > $R/step_350m.log 2>&1
grep -h "| paper" $R/step_350m.md; rm -f $R/*.png; pack
