#!/usr/bin/env bash
# session 20 call 2: the pipelined product kernels (b76e683's defaults: 3 stages, the
# transposed tiles loaded as such) against two variants in the whole step's routing
# kernels at 1280/73 with 8 heads: two-warp programs, four per SM ("w2"), and blocks of
# 32 sources ("ks32"); then 30 timed training steps at 1B and 350M (baseline and mhar).
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C PYTHONPATH=$PWD/src
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
echo '{}' > $R/base.cfg.json
echo '{"*": {"fwd_split_warps": 2, "fwd_split_progs_per_sm": 4, "coef_split_warps": 2, "coef_split_progs_per_sm": 4}}' > $R/w2.cfg.json
echo '{"*": {"dot_sources": 32}}' > $R/ks32.cfg.json
run() {  # shape variant
  n=${1%/*}; f=$R/ws${n}_$2; [ -e $f.md ] && f=${f}_2
  MHAR_ROUTING_CONFIG=$R/$2.cfg.json timeout 90 python3 bench/routing.py --step-only --no-one-pass --shapes $1 --heads 8 --chunk 8 --phase1 '{"": null}' --out $f.json > $f.log 2>&1
  echo "$n $2 $(python3 -c "
import json; j=json.load(open('$f.json'))
for s, rows in j['whole_step'].items():
    for r in rows: print(round(r['kernel_ms'], 2), '; '.join(f\"{k['name'][:18]} {k['ms']}\" for k in r['top'][:5]))")"; pack
}
for v in base w2 ks32; do run 1280/36 $v; done
for p in 1b 350m; do
  timeout 150 python3 -m mhar bench step --preset paper-$p --methods baseline,mhar --steps 30 --warmup 3 --out $R --tag $p > $R/step_$p.log 2>&1
  grep -h "| paper" $R/step_$p.md; rm -f $R/*.png; pack
done
