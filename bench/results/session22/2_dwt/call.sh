#!/usr/bin/env bash
# session 22 call 2: phase 1's product forward and COEF pass (a head per program) with the
# output and d(q*g) as (queries, lanes) products of the source tiles as loaded ("new"),
# where they loaded every tile a second time transposed ("old": $OLD's src/, coef_parts
# on, in ab_old/): the routing benchmark's whole step at 1280/73 and 1024/49 with 8 heads;
# the GPU routing tests of these paths; then 30 timed 1B and 350M steps with the faster.
set -uo pipefail
export PYTHONUNBUFFERED=1 MHAR_COMMIT=$C
R=$OUT/r; mkdir -p $R
pack() { tar czf "$OUT/r.tar.gz" -C "$OUT" r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > $R/gpu.txt
ms() { python3 -c "import json; print(round(sum(r['kernel_ms'] for rows in json.load(open('$1'))['whole_step'].values() for r in rows), 2))"; }
run() {  # shape variant
  n=${1%/*}; f=$R/ws${n}_$2
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
timeout 200 python3 -m pytest tests/routing/test_triton_cuda.py -q -x -k "as_products or one_head_per_program or two_phase or phase_one_rows or gradient_sink" > $R/tests_routing.log 2>&1; tail -n 1 $R/tests_routing.log; pack
[ "$(python3 -c "print(int($(ms $R/ws1280_new.json) < $(ms $R/ws1280_old.json)))")" = 1 ] || export PYTHONPATH=$PWD/ab_old/src
echo "steps with $PYTHONPATH" | tee $R/steps_src.txt
for p in 1b 350m; do
  timeout 150 python3 -m mhar bench step --preset paper-$p --methods baseline,mhar --steps 30 --warmup 3 --out $R --tag $p > $R/step_$p.log 2>&1
  grep -h "| paper" $R/step_$p.md; rm -f $R/*.png; pack
done
