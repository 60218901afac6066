#!/usr/bin/env bash
# session 25 call 2: the bars at 1B with merge_scales on by default: baseline, attnres and
# mhar in one process, then baseline and mhar again in a second, 30 steps each
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
timeout 240 python3 -m mhar bench step --preset paper-1b --methods baseline,attnres,mhar --steps 30 --warmup 3 --out $R --tag 1b > $R/step_1b.log 2>&1
grep -h "| paper" $R/step_1b.md; rm -f $R/*.png; pack
timeout 180 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar --steps 30 --warmup 3 --out $R --tag 1b_again > $R/step_1b_again.log 2>&1
grep -h "| paper" $R/step_1b_again.md; rm -f $R/*.png; pack
