#!/usr/bin/env bash
# session 14 call 3 (b3b1280): the training step at 1B and 350M (baseline, mhar, mhar-block), graphed; GPU tests not run on this session's kernels yet (routing tests outside call 2's set, and its last four)
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src MHAR_COMMIT=$NEW
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
for p in 1b 350m; do
  timeout 200 python3 -m mhar bench step --preset paper-$p --methods baseline,mhar,mhar-block --steps 6 --warmup 3 --out $R --tag $p > $R/step_$p.log 2>&1
  grep -h "| paper" $R/step_$p.md; rm -f $R/step_$p.png; pack
done
timeout 190 python3 -m pytest tests/routing/test_triton_cuda.py -k "not (products or partial or two_phase or rows) or 9-1280-1-3" -q -p no:cacheprovider > $R/tests.log 2>&1; tail -n 3 $R/tests.log; pack
