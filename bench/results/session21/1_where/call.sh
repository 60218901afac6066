#!/usr/bin/env bash
# session 21 call 1: where MHAR's extra step time goes. The 1B step profiled with every
# kernel's launches (bench/profile_step.py, baseline then mhar), the routing kernels'
# launches in order in the step and in the routing benchmark's whole step (1280/73, 8
# heads), and the GPU's clocks and power sampled every 100 ms throughout (smi.csv;
# marks.txt says when each part ran).
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
mark() { echo "$(date +%s.%N) $1" >> $R/marks.txt; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader -lms 100 > $R/smi.csv 2>&1 &
SMI=$!
mark ws_start
timeout 90 python3 bench/routing.py --step-only --no-one-pass --shapes 1280/36 --heads 8 --chunk 8 --phase1 '{"": null}' --out $R/ws1280.json > $R/ws1280.log 2>&1
mark ws_end; pack
for m in baseline mhar; do
  mark step_${m}_start
  timeout 120 python3 -m mhar bench step --preset paper-1b --methods $m --steps 30 --warmup 3 --out $R --tag 1b_$m > $R/step_$m.log 2>&1
  mark step_${m}_end; grep -h "| paper" $R/step_1b_$m.md; rm -f $R/*.png; pack
done
mark profile_start
timeout 240 python3 bench/profile_step.py --preset paper-1b --methods baseline,mhar --out $R > $R/profile.log 2>&1
mark profile_end
kill $SMI
tail -n 25 $R/profile.log; pack
