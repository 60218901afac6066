#!/usr/bin/env bash
# session 30 call 4: `mhar bench step --processes 3` on the GPU (first run of the option,
# built in session 29), at the shipped code (the weight copies reverted): the 100M
# baseline (the 40% MFU bar at its edge) and 1B baseline,mhar (the 0.85 bar at its edge),
# each three fresh processes, every row's median and range. 30 timed steps, 3 warm-up.
# run: C=<commit> OUT=$OUT bash bench/results/session30/4_processes/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
t0=$(date +%s)
bench() {  # $1 tag, $2 preset, $3 methods, $4 limit s
  timeout $4 python3 -m mhar bench step --preset $2 --methods $3 --steps 30 --warmup 3 --out $R --tag $1 \
    --processes 3 > $R/step_$1.log 2>&1
  echo "$1 at $(( $(date +%s) - t0 )) s:"; cat $R/step_$1.md; rm -f $R/*.png; pack
}
bench 100m paper-100m baseline 130
bench 1b paper-1b baseline,mhar 340
