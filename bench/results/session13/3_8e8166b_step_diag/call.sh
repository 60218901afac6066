#!/usr/bin/env bash
# session 13 call 3 (8e8166b): the 1B training step (baseline, mhar) with the per-query kernels' new tiles and with the code before (bfc7f23, ab_old/old_src); gather diagnostics at 1280/73/H8 (ab_old/diag_src: each variant drops one part of the gather's work, results wrong, timing only)
set -uo pipefail
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
for D in 0 1 2 3 4; do
  MHAR_DIAG=$D PYTHONPATH=$PWD/ab_old/diag_src timeout 60 python3 bench/routing.py --step-only --shapes 1280/36 --heads 8 --phase1 '{"": null}' --out $R/diag$D.json > $R/diag$D.log 2>&1
  echo "diag $D: $(grep -h 'H=8 two-phase' $R/diag$D.log) $(grep -h -m1 '_bwd_gather_kernel' $R/diag$D.log)"
done > $R/diag.txt; cat $R/diag.txt; rm -f $R/diag*.json $R/diag*.md; pack
for v in new old; do
  if [ $v = old ]; then P=$PWD/ab_old/old_src; C=bfc7f23; else P=$PWD/src; C=8e8166b; fi
  PYTHONPATH=$P MHAR_COMMIT=$C timeout 170 python3 -m mhar bench step --preset paper-1b --methods baseline,mhar --steps 6 --warmup 3 --out $R --tag 1b-$v > $R/step_1b-$v.log 2>&1
  grep -h "| paper" $R/step_1b-$v.md; pack
done
