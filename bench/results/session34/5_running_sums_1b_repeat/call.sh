#!/usr/bin/env bash
# session 34 call 5: call 3's 1b pair again in the other order (old new), baseline and
# mhar-block, one process each, 30 timed steps. _old_src/src was d4570cc's src, untracked,
# carried for the call (as in call 3). The call ran these commands inline; as a script:
# run: C=20aea5a OUT=$OUT bash bench/results/session34/5_running_sums_1b_repeat/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
for w in old new; do
  PYTHONPATH=$PWD/$([ $w = old ] && echo _old_src/src || echo src) timeout 120 python3 -m mhar bench step \
    --preset paper-1b --methods baseline,mhar-block --steps 30 --warmup 3 --out $R --tag 1b_$w > $R/step_$w.log 2>&1
  echo "1b $w"; grep -h "| paper" $R/step_1b_$w.md; rm -f $R/*.png; tar czf $OUT/r.tar.gz -C $OUT r
done
