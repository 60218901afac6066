#!/usr/bin/env bash
# session 14 call 2: phase 1's product kernels with the sum of squares as products and a persistent forward (new, src/) against c6c91f1 (ab_old/old_src): one phase-1 read's kernels at 1280/41 and 1024/33 with 8 heads, the whole step at 1280/73; the whole step at 1024/49 (backward warps by kind); GPU tests of the two-phase paths
set -uo pipefail
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
for v in old new; do
  if [ $v = old ]; then P=$PWD/ab_old/old_src; else P=$PWD/src; fi
  for s in "1280 41" "1024 33"; do set -- $s
    PYTHONPATH=$P timeout 60 python3 bench/phase1_call.py --d $1 --n $2 --heads 8 > $R/p1_${v}_$1.txt 2>&1
    echo "$v $1: $(grep -E '_dot_kernel|_gather' $R/p1_${v}_$1.txt | tr -s ' ' | tr '\n' ' ')"
  done
done | tee $R/p1.txt; pack
for v in old new; do
  if [ $v = old ]; then P=$PWD/ab_old/old_src; C=c6c91f1; else P=$PWD/src; C=$NEW; fi
  PYTHONPATH=$P MHAR_COMMIT=$C timeout 80 python3 bench/routing.py --step-only --shapes 1280/36 --phase1 '{"": null}' --out $R/ws1280_$v.json > $R/ws1280_$v.log 2>&1
  echo "$v: $(grep -h 'two-phase' $R/ws1280_$v.log | tr '\n' ' ')"; pack
done
PYTHONPATH=$PWD/src MHAR_COMMIT=$NEW timeout 70 python3 bench/routing.py --step-only --shapes 1024/24 --phase1 '{"": null}' --out $R/ws1024.json > $R/ws1024.log 2>&1
grep -h "two-phase" $R/ws1024.log; pack
PYTHONPATH=$PWD/src timeout 200 python3 -m pytest tests/routing/test_triton_cuda.py -k "products or partial or two_phase or rows" -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
