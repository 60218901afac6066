#!/usr/bin/env bash
# session 24 call 2: who launches the 100M baseline's kernels outside the products,
# attention and compiled regions (bench/profile_step.py --eager, its new _launchers.tsv)
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
timeout 150 python3 bench/profile_step.py --preset paper-100m --methods baseline --eager --out $R > $R/profile_100m.log 2>&1
tail -n 3 $R/profile_100m.log; head -n 25 $R/*_launchers.tsv | cut -c1-260; pack
