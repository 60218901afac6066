#!/usr/bin/env bash
# session 13 call 5 (c3c26aa): the 1B MHAR step alternating the code of bfc7f23 (ab_old/old_src) and this commit, to separate the change from the first process's slower start; the 350M step (baseline, mhar) at this commit
set -uo pipefail
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
for v in new1 old1 new2; do
  if [ ${v%?} = old ]; then P=$PWD/ab_old/old_src; C=bfc7f23; else P=$PWD/src; C=c3c26aa; fi
  PYTHONPATH=$P MHAR_COMMIT=$C timeout 90 python3 -m mhar bench step --preset paper-1b --methods mhar --steps 6 --warmup 3 --out $R --tag 1b-$v > $R/step_1b-$v.log 2>&1
  echo "$v $(grep -h '| paper' $R/step_1b-$v.md)"; rm -f $R/step_1b-$v.png; pack
done
PYTHONPATH=$PWD/src MHAR_COMMIT=c3c26aa timeout 130 python3 -m mhar bench step --preset paper-350m --methods baseline,mhar --steps 6 --warmup 3 --out $R --tag 350m > $R/step_350m.log 2>&1
grep -h "| paper" $R/step_350m.md; rm -f $R/step_350m.png; pack
