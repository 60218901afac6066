#!/usr/bin/env bash
# session 16 call 8: bytes and bandwidth of every compiled-region kernel of the baseline's step at 1B and 100M (bench/region_bytes.py, inductor's bandwidth profiler, eager)
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
for s in 1b 100m; do
  timeout 200 python3 bench/region_bytes.py --preset paper-$s --copy-gbs 4246 --out $R/regions_$s.json > $R/regions_$s.log 2>&1
  grep -v "^|" $R/regions_$s.log | tail -n 3; grep "^|" $R/regions_$s.log | head -14; pack
done
