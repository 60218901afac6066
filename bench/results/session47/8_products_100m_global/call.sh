#!/usr/bin/env bash
# session 47 call 8: is the slowdown of the backward's products in MHAR's step the power
# cap's? 100M at 8 x 2048 runs below the 700 W cap (283-398 W) and its products were not
# slower (call 3); at 64 x 2048 it runs at the cap (643-690 W). Same model and kernels per
# token: profile baseline and mhar at 64 x 2048 (pair_products.py in 7_products_350m pairs them).
# run: C=<commit> OUT=$OUT bash bench/results/session47/8_products_100m_global/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
timeout 170 python3 bench/profile_step.py --preset paper-100m --methods baseline,mhar --batch global --out $R \
  > $R/profile_100m_global.log 2>&1; echo "rc=$? profile"; tail -22 $R/profile_100m_global.log
tar czf "$OUT/r.tar.gz" -C "$OUT" r
