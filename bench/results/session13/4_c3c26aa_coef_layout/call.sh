#!/usr/bin/env bash
# session 13 call 4 (c3c26aa): phase 1's coefficients token-major; the whole step at 1280/73 against the code before (8e8166b, ab_old/prev_src); GPU tests of the two-phase paths; the 1B training step (baseline, mhar) with the code of bfc7f23 (ab_old/old_src) first, then this commit
set -uo pipefail
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
for v in prev new; do
  if [ $v = prev ]; then P=$PWD/ab_old/prev_src; C=8e8166b; else P=$PWD/src; C=c3c26aa; fi
  PYTHONPATH=$P MHAR_COMMIT=$C timeout 80 python3 bench/routing.py --step-only --shapes 1280/36 --phase1 '{"": null}' --out $R/ws1280_$v.json > $R/ws1280_$v.log 2>&1
  echo "$v: $(grep -h 'two-phase' $R/ws1280_$v.log | tr '\n' ' ')"; pack
done
PYTHONPATH=$PWD/src timeout 170 python3 -m pytest tests/routing/test_triton_cuda.py -k "partial or two_phase or products or sink or rows or deterministic" -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
for v in old new; do
  if [ $v = old ]; then P=$PWD/ab_old/old_src; C=bfc7f23; else P=$PWD/src; C=c3c26aa; fi
  PYTHONPATH=$P MHAR_COMMIT=$C timeout 150 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar --steps 6 --warmup 3 --out $R --tag 1b-$v > $R/step_1b-$v.log 2>&1
  grep -h "| paper" $R/step_1b-$v.md; pack
done
