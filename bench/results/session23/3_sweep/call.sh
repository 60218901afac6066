#!/usr/bin/env bash
# session 23 call 3: the lane-group product kernels' settings for one head, whole step at
# 1280/73 and 1024/49 (chunks of 8), every row in one process per shape: the defaults,
# 4 warps per program (and two COEF programs per SM), one forward program per SM, 2
# pipeline stages, blocks of 32 sources, the sum of squares elementwise
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
show() {
  python3 -c "
import json; j=json.load(open('$1'))
for s, rows in j['whole_step'].items():
    for r in rows: print(s, r['schedule'], round(r['kernel_ms'], 2), '; '.join(f\"{k['name'][:16]} {k['ms']}\" for k in r['top'][:4]))"
}
V='{"": null, "4 warps": {"dot_warps": 4}, "4 warps, 2 COEF per SM": {"dot_warps": 4, "coef_dot_progs_per_sm": 2},
"1 fwd per SM": {"fwd_dot_progs_per_sm": 1}, "2 stages": {"dot_stages": 2}, "32 sources": {"dot_sources": 32},
"sumsq elementwise": {"dot_sumsq_products": false}}'
for sh in 1280/36 1024/24; do
  n=${sh%/*}; f=$R/ws${n}_h1
  timeout 270 python3 bench/routing.py --step-only --no-one-pass --shapes $sh --heads 1 --chunk 8 --phase1 "$V" --out $f.json > $f.log 2>&1
  show $f.json; pack
done
