#!/usr/bin/env bash
# session 50 call 3: gemm_rate.py and overlap_probe.py after their operands moved into
# gemm_rate.product_operands: both at 100M, short.
# run: C=<commit> OUT=$OUT bash bench/results/session50/3_refactor_check/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
timeout 120 python3 bench/overlap_probe.py --preset paper-100m --mem-ms 4.2 --out $R/overlap_paper-100m.json > $R/overlap_paper-100m.log 2>&1
echo "overlap rc=$?"; tail -n 9 $R/overlap_paper-100m.log
timeout 150 python3 bench/gemm_rate.py --preset paper-100m --seconds 5 --out $R/gemm_100m.json > $R/gemm_100m.log 2>&1
echo "gemm_rate rc=$?"; tail -n 6 $R/gemm_100m.log
