#!/usr/bin/env bash
# session 21 call 2: a chunk of one site (the stream's final read) through the per-query
# forward ("new") against the product kernel with every head in one program ("old",
# bafbe3e's src/ in ab_old/), whole step's routing kernels at 1280/73 and 1024/49 with 8
# heads; the 1B step profiled with every kernel's launches (mhar only; call 1 has the
# baseline's); 30 timed steps at 1B and 350M.
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
    for r in rows: print(round(r['kernel_ms'], 2), '; '.join(f\"{k['name'][:18]} {k['ms']}\" for k in r['top'][:6]))")"; pack
}
for v in old new; do run 1280/36 $v; done
for v in old new; do run 1024/24 $v; done
export PYTHONPATH=$PWD/src
timeout 150 python3 bench/profile_step.py --preset paper-1b --methods mhar --out $R > $R/profile.log 2>&1
tail -n 12 $R/profile.log; pack
for p in 1b 350m; do
  timeout 150 python3 -m mhar bench step --preset paper-$p --methods baseline,mhar --steps 30 --warmup 3 --out $R --tag $p > $R/step_$p.log 2>&1
  grep -h "| paper" $R/step_$p.md; rm -f $R/*.png; pack
done
