#!/usr/bin/env bash
# session 25 call 5: block MHAR (8 blocks) at 350M and 1B against the baseline (last
# measured at those sizes before sessions 17-25's kernel and step changes), 30 steps,
# one process per preset
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
for p in 1b 350m; do
  timeout 190 python3 -m mhar bench step --preset paper-$p --methods baseline,mhar-block --steps 30 --warmup 3 \
    --out $R --tag $p > $R/step_$p.log 2>&1
  grep -h "| paper" $R/step_$p.md; rm -f $R/*.png; pack
done
