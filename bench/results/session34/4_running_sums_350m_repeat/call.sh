#!/usr/bin/env bash
# session 34 call 4: call 3's 350m pair again in the other order (new old), baseline and
# mhar-block, one process each, 30 timed steps. _old_src/src was d4570cc's src, untracked,
# carried for the call (as in call 3). The call ran these commands inline; as a script:
# run: C=20aea5a OUT=$OUT bash bench/results/session34/4_running_sums_350m_repeat/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
for w in new old; do
  PYTHONPATH=$PWD/$([ $w = old ] && echo _old_src/src || echo src) timeout 120 python3 -m mhar bench step \
    --preset paper-350m --methods baseline,mhar-block --steps 30 --warmup 3 --out $R --tag 350m_$w > $R/step_$w.log 2>&1
  echo "350m $w"; grep -h "| paper" $R/step_350m_$w.md; rm -f $R/*.png; tar czf $OUT/r.tar.gz -C $OUT r
done
