#!/usr/bin/env bash
# session 25 call 6: where block MHAR's time over the baseline goes now (its ratio fell
# from 0.948 in session 7 to 0.924 at 350M while both got faster): the graphed 350M step
# of baseline and mhar-block profiled by kernel kind (bench/profile_step.py)
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 280 python3 bench/profile_step.py --preset paper-350m --methods baseline,mhar-block --out $R > $R/profile_350m.log 2>&1
tail -n 30 $R/profile_350m.log | cut -c1-200; pack
