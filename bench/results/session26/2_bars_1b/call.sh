#!/usr/bin/env bash
# session 26 call 2: more samples of the 1B MHAR bar (0.850 at the median of four
# processes in session 25, a margin below a row's own spread): baseline and mhar in one
# process, three processes, 30 steps each
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
for k in 1 2 3; do
  timeout 175 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar --steps 30 --warmup 3 --out $R --tag 1b_$k > $R/step_1b_$k.log 2>&1
  grep -h "| paper" $R/step_1b_$k.md; rm -f $R/*.png; pack
done
