#!/usr/bin/env bash
# session 25 call 7: block MHAR (8 heads) one-pass (the 'auto' schedule since session 9,
# when two-phase was slower at 350M) against two-phase with today's phase-1 and merge
# kernels; 350M then 1B, baseline in the same process, 30 steps
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
for p in 350m:165 1b:175; do
  timeout ${p#*:} python3 -m mhar bench step --preset paper-${p%:*} --methods baseline,mhar-block,mhar-block@two-phase \
    --steps 30 --warmup 3 --out $R --tag ${p%:*} > $R/step_${p%:*}.log 2>&1
  grep -h "| paper" $R/step_${p%:*}.md || grep -h "{\"step_ms" $R/step_${p%:*}.log | cut -c1-80; rm -f $R/*.png; pack
done
