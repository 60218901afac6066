#!/usr/bin/env bash
# session 49 call 6: `mhar bench step`'s new table against issue 6's bars, on the GPU
# (100M, four methods), and the bench's tests that take no long run.
# run: C=<commit> OUT=$OUT bash bench/results/session49/6_bars_table/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
timeout 200 python3 -m mhar bench step --preset paper-100m --methods baseline,attnres,mhar,mhar-block \
  --steps 20 --warmup 3 --out $R --tag 100m > $R/step_100m.log 2>&1
echo "rc=$?"; rm -f $R/*.png; tail -n 16 $R/step_100m.md
timeout 150 python3 -m pytest -q tests/train/test_bench_step.py -k "bar_lines or writes_table" 2>&1 | tail -n 3 | tee $R/tests.log
