#!/usr/bin/env bash
# session 20 call 6: where the 1B step's time goes with the pipelined product kernels
# (bench/profile_step.py, baseline then mhar, graphed)
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 280 python3 bench/profile_step.py --preset paper-1b --methods baseline,mhar --out $R > $R/profile.log 2>&1
tail -n 30 $R/profile.log; pack
