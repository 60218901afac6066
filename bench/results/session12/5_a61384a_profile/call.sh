#!/usr/bin/env bash
# session 12 call 5: profile of the graphed 1B MHAR step with the direct phase-1 rows; the 350M step (baseline, mhar) at the final code
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 150 python3 bench/profile_step.py --preset paper-1b --methods mhar --out $R > $R/profile_1b.log 2>&1
tail -n 12 $R/profile_1b.log; pack
timeout 120 python3 -m mhar bench step --preset paper-350m --methods baseline,mhar,attnres --steps 6 --warmup 3 --out $R --tag 350m > $R/step_350m.log 2>&1
grep -h "| paper" $R/step_350m.md; pack
