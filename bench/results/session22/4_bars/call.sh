#!/usr/bin/env bash
# session 22 calls 4 and 5: where the bars stand at the session's code: 30 timed steps of
# every method (baseline, hyper, attnres, mhar, mhar-block; one process per preset) for
# each preset in $PRESETS (call 4: "100m 350m", call 5: "1b")
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
for p in $PRESETS; do
  timeout 280 python3 -m mhar bench step --preset paper-$p --methods baseline,hyper,attnres,mhar,mhar-block --steps 30 --warmup 3 --out $R --tag $p > $R/step_$p.log 2>&1
  grep -h "| paper" $R/step_$p.md; rm -f $R/*.png; pack
done
