#!/usr/bin/env bash
# session 20 call 7: the gather's sum of c's per-head parts (CH = 8 with the COEF pass a
# head per program) unrolled, so that its eight loads are in flight together where the
# loop issued each after the last one's add, against the commit before ("old",
# ab_old/src); whole step's routing kernels at 1280/73 with 8 heads, then the GPU tests of
# phase 1's split kernels.
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
run() {  # shape variant
  n=${1%/*}; f=$R/ws${n}_$2; [ -e $f.md ] && f=${f}_2
  src=$PWD/src; [ $2 = old ] && src=$PWD/ab_old/src
  PYTHONPATH=$src timeout 60 python3 bench/routing.py --step-only --no-one-pass --shapes $1 --heads 8 --chunk 8 --phase1 '{"": null}' --out $f.json > $f.log 2>&1
  echo "$n $2 $(python3 -c "
import json; j=json.load(open('$f.json'))
for s, rows in j['whole_step'].items():
    for r in rows: print(round(r['kernel_ms'], 2), '; '.join(f\"{k['name'][:18]} {k['ms']}\" for k in r['top'][:5]))")"; pack
}
for v in old new old new; do run 1280/36 $v; done
PYTHONPATH=$PWD/src timeout 60 python3 -m pytest tests/routing/test_triton_cuda.py -q -p no:cacheprovider -k "one_head_per_program" > $R/tests.log 2>&1; tail -n 2 $R/tests.log; pack
