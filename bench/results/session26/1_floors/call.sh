#!/usr/bin/env bash
# session 26 call 1: the baseline's measured floors by part. The step's matrix products
# alone under sustained load (bench/gemm_rate.py, new) at every size; the compiled
# regions' bytes at 350M (bench/region_bytes.py; session 16 measured 100M and 1B only);
# the graphed baseline step by kernel kind at 100M and 1B with this code
# (bench/profile_step.py; 350M is session 25's call 6)
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $R/gpu.csv 2>&1
for s in 100m 350m 1b; do
  timeout 90 python3 bench/gemm_rate.py --preset paper-$s --seconds 25 --out $R/gemm_$s.json > $R/gemm_$s.log 2>&1
  grep "^paper" $R/gemm_$s.log; pack
done
timeout 150 python3 bench/region_bytes.py --preset paper-350m --copy-gbs 4246 --out $R/regions_350m.json > $R/regions_350m.log 2>&1
grep -v "^|" $R/regions_350m.log | tail -n 3; pack
for s in 1b 100m; do
  timeout 150 python3 bench/profile_step.py --preset paper-$s --methods baseline --out $R > $R/profile_$s.log 2>&1
  tail -n 12 $R/profile_$s.log | cut -c1-160; pack
done
