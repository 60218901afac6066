#!/usr/bin/env bash
# session 20 call 4: the product kernels as shipped (one pipelined loop over (token,
# block) pairs, 3 stages, the transposed tiles loaded as such, the COEF pass's gradient
# rows loaded at every block) against e316e16's src/ ("old", ab_old/src): whole step's
# routing kernels with 8 heads at 1280/73 and 1024/49, then 30 timed training steps at
# 1B and 350M (baseline and mhar).
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
run() {  # shape variant
  n=${1%/*}; f=$R/ws${n}_$2; [ -e $f.md ] && f=${f}_2
  src=$PWD/src; [ $2 = old ] && src=$PWD/ab_old/src
  PYTHONPATH=$src timeout 90 python3 bench/routing.py --step-only --no-one-pass --shapes $1 --heads 8 --chunk 8 --phase1 '{"": null}' --out $f.json > $f.log 2>&1
  echo "$n $2 $(python3 -c "
import json; j=json.load(open('$f.json'))
for s, rows in j['whole_step'].items():
    for r in rows: print(round(r['kernel_ms'], 2), '; '.join(f\"{k['name'][:18]} {k['ms']}\" for k in r['top'][:5]))")"; pack
}
for v in old new; do run 1280/36 $v; done
for v in old new; do run 1024/24 $v; done
export PYTHONPATH=$PWD/src
for p in 1b 350m; do
  timeout 150 python3 -m mhar bench step --preset paper-$p --methods baseline,mhar --steps 30 --warmup 3 --out $R --tag $p > $R/step_$p.log 2>&1
  grep -h "| paper" $R/step_$p.md; rm -f $R/*.png; pack
done
