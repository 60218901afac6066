#!/usr/bin/env bash
# session 29 call 4: the spread between processes at the shipped code, for the two bars
# that sit at their edge: the 100M baseline's MFU (40%), five processes of
# `mhar bench step --preset paper-100m --methods baseline`; and 1B MHAR (0.85), two
# processes of baseline and mhar in one process each. 30 timed steps, 3 warm-up
# run: C=<commit> OUT=$OUT bash bench/results/session29/4_spread/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
t0=$(date +%s)
bench() {  # $1 tag, $2 preset, $3 methods, $4 limit s
  timeout $4 python3 -m mhar bench step --preset $2 --methods $3 --steps 30 --warmup 3 --out $R --tag $1 \
    > $R/step_$1.log 2>&1
  echo "$1 at $(( $(date +%s) - t0 )) s:"; grep -h '| paper' $R/step_$1.md; rm -f $R/*.png; pack
}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv > $R/gpu.csv 2>&1; cat $R/gpu.csv
for k in 1 2 3 4 5; do bench 100m_$k paper-100m baseline 80; done
for k in 1 2; do bench 1b_$k paper-1b baseline,mhar 200; done
