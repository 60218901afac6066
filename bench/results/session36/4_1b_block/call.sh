#!/usr/bin/env bash
# session 36 call 4 (ran inline on the warm machine after call 3; this records the
# command): the 1B step as built, baseline and mhar-block ('auto'), one process.
# run: C=<commit> OUT=$OUT bash bench/results/session36/4_1b_block/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
mkdir -p $OUT/r
timeout 230 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar-block --steps 30 --warmup 3 \
  --out $OUT/r --tag 1b_built > $OUT/r/step_1b_built.log 2>&1
grep -h "| paper" $OUT/r/step_1b_built.md; rm -f $OUT/r/*.png
