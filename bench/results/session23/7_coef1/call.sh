#!/usr/bin/env bash
# session 23 call 7: one head's COEF pass with the logits and g.x summed over the lane
# groups in one reduction and the coefficients and c formed as (KS, SP) tiles ("new")
# against a reduction each and c summed over the groups ("old": $OLD's src/, copied to
# ab_old/ for the call): whole step with one head at 1280/73 and 1024/49; then the GPU
# tests of the lane groups
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
show() {
  python3 -c "
import json; j=json.load(open('$1'))
for s, rows in j['whole_step'].items():
    for r in rows: print(s, '$2', round(r['kernel_ms'], 2), '; '.join(f\"{k['name'][:16]} {k['ms']}\" for k in r['top'][:5]))"
}
for sh in 1280/36 1024/24; do
  for v in old new; do
    n=${sh%/*}; f=$R/ws${n}_h1_$v
    src=$PWD/src; [ $v = old ] && src=$PWD/ab_old/src
    PYTHONPATH=$src timeout 45 python3 bench/routing.py --step-only --no-one-pass --shapes $sh --heads 1 --chunk 8 --phase1 '{"": null}' --out $f.json > $f.log 2>&1
    show $f.json $v; pack
  done
done
PYTHONPATH=$PWD/src timeout 70 python3 -m pytest tests/routing/test_triton_cuda.py -q -x -k "lane_groups" > $R/tests_routing.log 2>&1; tail -n 1 $R/tests_routing.log; pack
