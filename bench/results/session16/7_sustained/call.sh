#!/usr/bin/env bash
# session 16 call 7: the fused-loss GPU test with the reversed second pass; 30 timed steps per method (sustained load, where the 700 W cap lowers the SM clock) at 1B, 350M and 100M: baseline, mhar, mhar-block, clocks sampled every 100 ms
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 60 python3 -m pytest tests/core/test_fused_ce.py -q -p no:cacheprovider -k "cuda or gpu" > $R/tests.log 2>&1; tail -n 1 $R/tests.log
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 100 > $R/smi.csv 2>&1 &
SMI=$!
for p in 1b:170 350m:150 100m:110; do
  s=${p%:*}; t=${p#*:}
  timeout $t python3 -m mhar bench step --preset paper-$s --methods baseline,mhar,mhar-block --steps 30 --warmup 3 --out $R --tag ${s}_30 > $R/step_${s}_30.log 2>&1
  grep -h "| paper" $R/step_${s}_30.md; rm -f $R/step_${s}_30.png; pack
done
kill $SMI; pack
