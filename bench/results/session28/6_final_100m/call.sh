#!/usr/bin/env bash
# session 28 call 6: the code as it ends the session (one-pass CE, the tied embedding's
# gradient into the head's; the weight copies reverted): the fused-loss GPU tests, then
# the 100M step, baseline and the routed methods in one process
# run: C=<commit> OUT=$OUT bash bench/results/session28/6_final_100m/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
FILES="tests/core/test_fused_ce.py" T_FILE=60 bash bench/gpu_tests.sh
timeout 125 python3 -m mhar bench step --preset paper-100m --methods baseline,mhar,attnres,mhar-block --steps 30 \
  --warmup 3 --out $R --tag 100m > $R/step_100m.log 2>&1
echo "100m: rc $?"; grep -h "| paper" $R/step_100m.md; rm -f $R/*.png; pack
