#!/usr/bin/env bash
# session 25 call 4: the two-phase chunk again at 1B (8 since session 16, when 16 was
# faster in the 1B step but slower after that session's kernel changes; the kernels have
# changed since): the whole-step routing at 1280/73 with 8 heads and chunks of 8, 12, 16
# (one process each); then the 1B baseline and mhar with chunks of 16 and of 8, one
# process each, 30 steps
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
for s in 8 16 12; do
  timeout 90 python3 bench/routing.py --step-only --no-one-pass --no-peers --shapes 1280/36 --heads 8 --chunk $s \
    --phase1 '{"": null}' --out $R/routing_1280_s$s.json > $R/routing_1280_s$s.log 2>&1
  grep -h "whole step" $R/routing_1280_s$s.log; pack
done
for s in 16 8; do
  timeout 170 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar --chunk $s --steps 30 --warmup 3 \
    --out $R --tag 1b_s$s > $R/step_1b_s$s.log 2>&1
  echo "chunk $s"; grep -h "| paper" $R/step_1b_s$s.md; rm -f $R/*.png; pack
done
