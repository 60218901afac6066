#!/usr/bin/env bash
# session 47 call 7: which of 350M's matrix products run slower in MHAR's step than in the
# baseline's (session 42: +2.74 ms of products, the backward's 4-8% slower): every product
# and attention launch in order, with the kernel before it (bench/profile_step.py's new
# _product_launches.tsv), graphed, baseline then mhar.
# run: C=<commit> OUT=$OUT bash bench/results/session47/7_products_350m/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.csv
timeout 250 python3 bench/profile_step.py --preset paper-350m --methods baseline,mhar --out $R \
  > $R/profile_350m.log 2>&1; echo "rc=$? profile"; tail -22 $R/profile_350m.log
tar czf "$OUT/r.tar.gz" -C "$OUT" r
