#!/usr/bin/env bash
# session 18 call 3: the COEF pass with a head per program on by default: 30 timed steps
# per method at 1B, 350M and 100M (baseline, mhar, mhar-block; one process per preset)
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
for p in 1b 350m 100m; do
  timeout 200 python3 -m mhar bench step --preset paper-$p --methods baseline,mhar,mhar-block --steps 30 --warmup 3 --out $R --tag $p > $R/step_$p.log 2>&1
  grep -h "| paper" $R/step_$p.md; rm -f $R/*.png; pack
done
