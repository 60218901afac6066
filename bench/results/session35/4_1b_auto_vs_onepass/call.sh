#!/usr/bin/env bash
# session 35 call 4 (ran inline on the warm machine, this file records it): 1B block MHAR
# 'auto' (first three blocks one-pass, the rest two-phase) against one-pass, with the
# baseline in the same process, 20 timed steps. Commit 65a45dc.
# run: MHAR_COMMIT=65a45dc OUT=$OUT bash bench/results/session35/4_1b_auto_vs_onepass/call.sh
export PYTHONPATH=$PWD/src MHAR_COMMIT=${MHAR_COMMIT:-65a45dc}; R=$OUT/r; mkdir -p $R
timeout 230 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar-block,mhar-block@one-pass --steps 20 \
  --warmup 3 --out $R --tag 1b_auto_vs_onepass > $R/step.log 2>&1
grep -h "| paper" $R/*.md; rm -f $R/*.png
